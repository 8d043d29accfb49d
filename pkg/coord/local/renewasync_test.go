package local

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fence-dev/fence/pkg/coord"
)

type renewAnswer struct {
	r   coord.Renewal
	err error
}

// renewAsync starts a renewal through RenewAsync and returns where its
// answers go (done must be called once: a second answer fails the test).
func renewAsync(t *testing.T, c *coordinator, l *coord.Lease) (<-chan renewAnswer, func()) {
	t.Helper()
	ch := make(chan renewAnswer, 2)
	cancel := c.RenewAsync(l.Name, l.ID, func(r coord.Renewal, err error) { ch <- renewAnswer{r, err} })
	return ch, cancel
}

func awaitAnswer(t *testing.T, what string, ch <-chan renewAnswer) renewAnswer {
	t.Helper()
	select {
	case a := <-ch:
		return a
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: no answer within 5 s", what)
		return renewAnswer{}
	}
}

func noAnswer(t *testing.T, what string, ch <-chan renewAnswer) {
	t.Helper()
	select {
	case a := <-ch:
		t.Fatalf("%s: answered %+v", what, a)
	case <-time.After(150 * time.Millisecond):
	}
}

// holdFlock takes the flock of lock name's lock file through a file
// description of its own, as another process in the middle of an update of
// the lock would hold it.
func holdFlock(t *testing.T, c *coordinator, name string) (release func()) {
	t.Helper()
	fd, err := unix.Open(c.files(name).lock, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Flock(fd, unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	done := false
	release = func() {
		if !done {
			done = true
			_ = unix.Flock(fd, unix.LOCK_UN)
			unix.Close(fd)
		}
	}
	t.Cleanup(release)
	return release
}

// TestRenewAsync: a renewal through RenewAsync renews as Renew does, and
// one whose lock file's flock is held waits for it on a goroutine of its
// own: the renewal of another lock queued behind it is answered meanwhile
// (a queue that waited for the flock in line would hold it until the flock
// is released), and the waiting one renews once the flock is free.
func TestRenewAsync(t *testing.T) {
	c := openTB(t, filepath.Join(t.TempDir(), "state"))
	ctx := context.Background()
	acquire := func(name string) *coord.Lease {
		l, err := c.Acquire(ctx, name, coord.AcquireOptions{TTL: time.Minute, Holder: "t", Wait: 0})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	a, b := acquire("a"), acquire("b")
	time.Sleep(20 * time.Millisecond)
	left := func(name string) time.Duration {
		info, err := c.Inspect(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		return info.TTLLeft
	}
	leftA, leftB := left("a"), left("b")

	release := holdFlock(t, c, "a")
	before := time.Now()
	ansA, _ := renewAsync(t, c, a)
	ansB, _ := renewAsync(t, c, b)
	got := awaitAnswer(t, "the renewal of b, queued behind a's (whose flock is held)", ansB)
	if got.err != nil || got.r.TTL != time.Minute || got.r.Sent.Before(before) {
		t.Fatalf("renewal of b = %+v, want TTL 1m and Sent after %v", got, before)
	}
	if l := left("b"); l <= leftB {
		t.Errorf("b's time left %v after the renewal, %v before: not renewed", l, leftB)
	}
	noAnswer(t, "the renewal of a, while a's flock is held", ansA)
	release()
	got = awaitAnswer(t, "the renewal of a, once its flock is free", ansA)
	if got.err != nil || got.r.TTL != time.Minute {
		t.Fatalf("renewal of a = %+v", got)
	}
	if l := left("a"); l <= leftA {
		t.Errorf("a's time left %v after the renewal, %v before: not renewed", l, leftA)
	}
	noAnswer(t, "a's renewal, answered already", ansA)

	// A lease that is gone is answered ErrLeaseLost, as Renew answers it.
	if err := c.Release(ctx, "b", b.ID); err != nil {
		t.Fatal(err)
	}
	ansB, _ = renewAsync(t, c, b)
	if got := awaitAnswer(t, "the renewal of a released lease", ansB); !errors.Is(got.err, coord.ErrLeaseLost) {
		t.Fatalf("renewal of a released lease = %+v, want ErrLeaseLost", got)
	}
}

// TestRenewAsyncCancel: cancel answers a renewal context.Canceled, once,
// also one that waits for a held flock (which then stops waiting: the
// flock's release brings no second answer); a cancel after the answer
// changes nothing.
func TestRenewAsyncCancel(t *testing.T) {
	c := openTB(t, filepath.Join(t.TempDir(), "state"))
	ctx := context.Background()
	l, err := c.Acquire(ctx, "a", coord.AcquireOptions{TTL: time.Minute, Holder: "t", Wait: 0})
	if err != nil {
		t.Fatal(err)
	}
	release := holdFlock(t, c, "a")
	ans, cancel := renewAsync(t, c, l)
	noAnswer(t, "the renewal, while the flock is held", ans)
	cancel()
	if got := awaitAnswer(t, "the cancelled renewal", ans); !errors.Is(got.err, context.Canceled) {
		t.Fatalf("cancelled renewal = %+v, want context.Canceled", got)
	}
	cancel()
	release()
	noAnswer(t, "the cancelled renewal, after the flock's release", ans)

	ans, cancel = renewAsync(t, c, l)
	if got := awaitAnswer(t, "a renewal", ans); got.err != nil {
		t.Fatalf("renewal = %+v", got)
	}
	cancel()
	noAnswer(t, "a renewal cancelled after its answer", ans)
}
