package etcd

import (
	"context"
	"testing"
	"time"

	"github.com/fence-dev/fence/internal/etcdtest"
	"github.com/fence-dev/fence/pkg/coord"
)

// TestWatchResetAfterCompaction: a watch whose revision was compacted away
// sends EventReset, reads the locks again and goes on.
func TestWatchResetAfterCompaction(t *testing.T) {
	t.Parallel()
	srv := etcdtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := dial(ctx, srv.Endpoints())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	// A watcher that read the locks, then fell behind a compaction.
	w := &watcher{c: c, prefix: "", rng: c.locksKey(""), ch: make(chan coord.Event, 64)}
	if err := w.resync(ctx); err != nil {
		t.Fatal(err)
	}
	opts := coord.AcquireOptions{TTL: time.Minute}
	for i := 0; i < 3; i++ {
		l, err := c.Acquire(ctx, "a", opts)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Release(ctx, "a", l.ID); err != nil {
			t.Fatal(err)
		}
	}
	held, err := c.Acquire(ctx, "held", opts)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.cli.Get(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.cli.Compact(ctx, resp.Header.Revision); err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	go w.run(wctx)

	next := func() coord.Event {
		t.Helper()
		select {
		case ev := <-w.ch:
			return ev
		case <-ctx.Done():
			t.Fatal("no event")
			return coord.Event{}
		}
	}
	if ev := next(); ev.Type != coord.EventReset {
		t.Fatalf("first event %+v, want a reset", ev)
	}
	// After the reset the watcher knows "held" is held: releasing it is
	// reported, and so is a new acquisition.
	if err := c.Release(ctx, "held", held.ID); err != nil {
		t.Fatal(err)
	}
	if ev := next(); ev.Type != coord.EventReleased || ev.Info.Name != "held" {
		t.Fatalf("event %+v, want held released", ev)
	}
	l, err := c.Acquire(ctx, "b", opts)
	if err != nil {
		t.Fatal(err)
	}
	if ev := next(); ev.Type != coord.EventAcquired || ev.Info.Name != "b" || ev.Info.Token != l.Token {
		t.Fatalf("event %+v, want b acquired with token %d", ev, l.Token)
	}
	wcancel()
	for range w.ch {
	}
}

// TestWatchAcrossRestart: a watch goes on (after a reset, if it lost track)
// when the server restarts.
func TestWatchAcrossRestart(t *testing.T) {
	t.Parallel()
	srv := etcdtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := dial(ctx, srv.Endpoints())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ch, err := c.Watch(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	srv.Restart(t)
	l, err := c.Acquire(ctx, "after", coord.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	for {
		select {
		case ev := <-ch:
			if ev.Type == coord.EventReset {
				continue
			}
			if ev.Type != coord.EventAcquired || ev.Info.Token != l.Token {
				t.Fatalf("event %+v, want the acquisition of token %d", ev, l.Token)
			}
			return
		case <-ctx.Done():
			t.Fatal("no event after the restart")
		}
	}
}

func TestParseKey(t *testing.T) {
	c := &coordinator{prefix: "/p/"}
	for _, name := range []string{"a", "a/b", "%", "é ✓", "a%2Fb", "/"} {
		got, ok := c.parseKey(c.leaseKey(name, 0x1f))
		if !ok || got != name {
			t.Errorf("parseKey(leaseKey(%q)) = %q, %v", name, got, ok)
		}
	}
	for _, key := range []string{"/p/locks/a", "/q/locks/a/1", "/p/locks/a/b/1", "/p/locks/%zz/1", "/p/locks//1", "/p/locks/%00/1"} {
		if name, ok := c.parseKey(key); ok {
			t.Errorf("parseKey(%q) = %q, want not ours", key, name)
		}
	}
}
