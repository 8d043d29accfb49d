package localstore

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/coord/local"
	"github.com/fence-dev/fence/pkg/history"
)

// TestReleaseWithItsEvent: the released event of a lease the Recorder
// acquired is appended under the lock's flock, before the release
// (package local's ReleaseWith), with no read of the lock of its own: a
// waiter in another coordinator that gets the lock finds the event on
// record the moment its Acquire returns. A store of another state
// directory does not take that path and writes nothing; a lease that is
// gone before its release is not released with an event, and the usual
// path records it expired.
func TestReleaseWithItsEvent(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir := filepath.Join(t.TempDir(), "state")
	openPair := func() (coord.Coordinator, *store) {
		c, err := local.Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		s, err := openStore(dir)
		if err != nil {
			t.Fatal(err)
		}
		return c, s
	}
	c, s := openPair()
	r := history.Wrap(c, s)
	defer r.Close()
	c2, s2 := openPair()
	defer c2.Close()

	l, err := r.Acquire(ctx, "job", coord.AcquireOptions{TTL: 10 * time.Second, Holder: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	seen := make(chan []history.Event, 1)
	go func() {
		w, err := c2.Acquire(ctx, "job", coord.AcquireOptions{TTL: 10 * time.Second, Holder: "bob", Wait: coord.WaitForever})
		if err != nil {
			t.Error(err)
			seen <- nil
			return
		}
		evs, err := s2.History(ctx, "job", 0)
		if err != nil {
			t.Error(err)
		}
		// Released before the history is handed over: the test acquires
		// the lock again (no wait) as soon as it has it.
		if err := c2.Release(ctx, "job", w.ID); err != nil {
			t.Error(err)
		}
		seen <- evs
	}()
	for {
		info, err := c.Inspect(ctx, "job")
		if err != nil {
			t.Fatal(err)
		}
		if info.Waiters == 1 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := r.Release(ctx, "job", l.ID); err != nil {
		t.Fatal(err)
	}
	evs := <-seen
	if len(evs) != 2 || evs[1].Kind != history.Released || evs[1].Token != l.Token || evs[1].Holder != "alice" {
		t.Fatalf("history when the next holder got the lock: %+v; want acquired, then released of token %d by alice", evs, l.Token)
	}

	// Straight to AppendRelease: a store of another state directory leaves
	// the lease and its history alone.
	l, err = c.Acquire(ctx, "job", coord.AcquireOptions{TTL: 10 * time.Second, Holder: "carol"})
	if err != nil {
		t.Fatal(err)
	}
	other := open(t)
	ev := history.Event{Lock: "job", Kind: history.Released, Holder: "carol", Token: l.Token}
	if done, err := other.AppendRelease(ctx, c, l.ID, l.Token, ev); done || err != nil {
		t.Fatalf("store of another directory: done %v, %v; want not done", done, err)
	}
	if info, err := c.Inspect(ctx, "job"); err != nil || !info.Held {
		t.Fatalf("after the other store's AppendRelease: %+v, %v; want still held", info, err)
	}
	if evs, err := other.History(ctx, "job", 0); err != nil || len(evs) != 0 {
		t.Fatalf("other store's history: %+v, %v; want empty", evs, err)
	}
	if done, err := s.AppendRelease(ctx, c, l.ID, l.Token, ev); !done || err != nil {
		t.Fatalf("AppendRelease: done %v, %v; want done", done, err)
	}
	if info, err := c.Inspect(ctx, "job"); err != nil || info.Held {
		t.Fatalf("after AppendRelease: %+v, %v; want free", info, err)
	}
	n := 0
	if evs, err := s.History(ctx, "job", 0); err == nil {
		n = len(evs)
	}

	// A lease revoked before its release: not done, nothing written.
	l, err = r.Acquire(ctx, "job", coord.AcquireOptions{TTL: 10 * time.Second, Holder: "dave"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Revoke(ctx, "job"); err != nil {
		t.Fatal(err)
	}
	ev = history.Event{Lock: "job", Kind: history.Released, Holder: "dave", Token: l.Token}
	if done, err := s.AppendRelease(ctx, c, l.ID, l.Token, ev); done || err != nil {
		t.Fatalf("revoked lease: done %v, %v; want not done", done, err)
	}
	evs, err = s.History(ctx, "job", 0)
	if err != nil || len(evs) != n+1 || evs[n].Kind != history.Acquired || evs[n].Holder != "dave" {
		t.Fatalf("history after the revoked lease's AppendRelease: %+v, %v; want only dave's acquired added", evs, err)
	}
}
