package local

import (
	"errors"
	"os"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fence-dev/fence/pkg/coord"
)

// TestReleaseWith: before runs under the lock's flock (another open of the
// lock file cannot take it meanwhile), before the release is written, and
// only for the live lease of the given token: another token, a released
// lease, a revoked one or an expired one report held false and run
// nothing; an error of before leaves the lease holding the lock.
func TestReleaseWith(t *testing.T) {
	c, err := open(newDir(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := tctx(t)
	acquire := func(ttl time.Duration) *coord.Lease {
		t.Helper()
		l, err := c.Acquire(ctx, "job", coord.AcquireOptions{TTL: ttl})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	calls := 0
	never := func() error { calls++; return nil }

	l := acquire(10 * time.Second)
	if held, err := c.ReleaseWith(ctx, "job", l.ID, l.Token+1, never); err != nil || held || calls != 0 {
		t.Fatalf("another token: held %v, %v, before called %d times; want not held, never called", held, err, calls)
	}
	boom := errors.New("boom")
	if held, err := c.ReleaseWith(ctx, "job", l.ID, l.Token, func() error { return boom }); !errors.Is(err, boom) || !held {
		t.Fatalf("failing before: held %v, %v; want held and its error", held, err)
	}
	if info, err := c.Inspect(ctx, "job"); err != nil || !info.Held || info.Token != l.Token {
		t.Fatalf("after a failing before: %+v, %v; want still held under token %d", info, err, l.Token)
	}

	f := c.files("job")
	var underFlock, stillHeld bool
	held, err := c.ReleaseWith(ctx, "job", l.ID, l.Token, func() error {
		fd, err := unix.Open(f.lock, unix.O_RDWR|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		underFlock = errors.Is(unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB), syscall.EWOULDBLOCK)
		st, err := load(f)
		if err != nil {
			return err
		}
		stillHeld = st.Holder != nil && st.Holder.Token == l.Token
		return nil
	})
	if err != nil || !held || !underFlock || !stillHeld {
		t.Fatalf("release: held %v, %v; before under the flock %v, with the lease still on record %v; want all true",
			held, err, underFlock, stillHeld)
	}
	if info, err := c.Inspect(ctx, "job"); err != nil || info.Held {
		t.Fatalf("after ReleaseWith: %+v, %v; want free", info, err)
	}
	if held, err := c.ReleaseWith(ctx, "job", l.ID, l.Token, never); err != nil || held || calls != 0 {
		t.Fatalf("released lease: held %v, %v, before called %d times; want not held, never called", held, err, calls)
	}

	l = acquire(10 * time.Second)
	if _, err := c.Revoke(ctx, "job"); err != nil {
		t.Fatal(err)
	}
	if held, err := c.ReleaseWith(ctx, "job", l.ID, l.Token, never); err != nil || held || calls != 0 {
		t.Fatalf("revoked lease: held %v, %v, before called %d times; want not held, never called", held, err, calls)
	}

	l = acquire(200 * time.Millisecond)
	time.Sleep(300 * time.Millisecond)
	if held, err := c.ReleaseWith(ctx, "job", l.ID, l.Token, never); err != nil || held || calls != 0 {
		t.Fatalf("expired lease: held %v, %v, before called %d times; want not held, never called", held, err, calls)
	}
	if _, err := os.Stat(f.state); err != nil {
		t.Fatal(err)
	}
}
