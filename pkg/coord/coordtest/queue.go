package coordtest

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/fence-dev/fence/pkg/coord"
)

// holders is the holder identities of a queue, in its order.
func holders(q []coord.Waiter) []string {
	hs := make([]string, len(q))
	for i, w := range q {
		hs[i] = w.Holder
	}
	return hs
}

// queue: Inspect, List and Watch name who waits, in the order they will be
// served, each with since when it waits (and its lease, where it has one);
// when the holder goes the first waiter holds, under the lease it waited
// with, and the others move up.
func (s *suite) queue(t *testing.T) {
	name := s.name(t, "queue")
	c := s.client(t)
	cx := ctx(t)
	wctx, cancel := context.WithCancel(cx)
	defer cancel()
	events, err := c.Watch(wctx, name)
	if err != nil {
		t.Fatalf("Watch(%q): %v", name, err)
	}
	// The queue as each event shows it; only this lock is under the prefix.
	watched := func(want []string) {
		t.Helper()
		timer := time.NewTimer(guard)
		defer timer.Stop()
		var last []string
		for {
			select {
			case ev, ok := <-events:
				if !ok {
					t.Fatalf("watch closed while waiting for the queue %v", want)
				}
				if ev.Info.Name != name {
					continue
				}
				last = holders(ev.Info.Queue)
				if slices.Equal(last, want) && ev.Info.Waiters == len(want) {
					return
				}
			case <-timer.C:
				t.Fatalf("no watch event shows the queue %v within %v (last seen %v)", want, guard, last)
			}
		}
	}

	first := acquire(t, c, name, coord.AcquireOptions{Holder: "holder", TTL: guard})
	if i := inspect(t, c, name); len(i.Queue) != 0 {
		t.Errorf("Inspect of a lock nobody waits for: Queue = %+v; want none", i.Queue)
	}
	const n = 3
	chans := make([]<-chan result, n)
	var want []string
	before := time.Now()
	for i := range chans {
		queued := make(chan struct{})
		h := fmt.Sprintf("w%d", i)
		chans[i] = goAcquire(cx, s.client(t), name, coord.AcquireOptions{Holder: h, Wait: coord.WaitForever, OnWait: notify(queued)})
		signalled(t, queued, "waiter "+h+" queued")
		want = append(want, h)
	}
	after := time.Now()
	check := func(what string, i coord.LockInfo, want []string) {
		t.Helper()
		if got := holders(i.Queue); !slices.Equal(got, want) || i.Waiters != len(want) {
			t.Fatalf("%s: Waiters %d, Queue %v; want %v, in their order", what, i.Waiters, got, want)
		}
		for j, w := range i.Queue {
			if w.Since.IsZero() || w.Since.Before(before.Add(-time.Second)) || w.Since.After(after.Add(time.Second)) {
				t.Errorf("%s: waiter %s queued since %v; want between %v and %v", what, w.Holder, w.Since, before, after)
			}
			if j > 0 && w.Since.Before(i.Queue[j-1].Since.Add(-time.Second)) {
				t.Errorf("%s: waiter %s queued at %v, well before %s ahead of it (%v)", what, w.Holder, w.Since, i.Queue[j-1].Holder, i.Queue[j-1].Since)
			}
			if w.LeaseID != "" && (w.LeaseID == i.LeaseID || j > 0 && w.LeaseID == i.Queue[j-1].LeaseID) {
				t.Errorf("%s: waiter %s shows lease %s, another's", what, w.Holder, w.LeaseID)
			}
		}
	}
	check("Inspect", inspect(t, c, name), want)
	infos, err := c.List(cx, name)
	if err != nil {
		t.Fatalf("List(%q): %v", name, err)
	}
	k := slices.IndexFunc(infos, func(i coord.LockInfo) bool { return i.Name == name })
	if k < 0 {
		t.Fatalf("List(%q) lacks the lock: %+v", name, infos)
	}
	check("List", infos[k], want)
	watched(want)

	queuedLease := inspect(t, c, name).Queue[0].LeaseID
	release(t, c, first)
	r := await(t, chans[0], "waiter w0")
	if r.err != nil {
		t.Fatalf("waiter w0 after the release: %v", r.err)
	}
	if queuedLease != "" && r.l.ID != queuedLease {
		t.Errorf("w0 holds under lease %s; the queue showed it waiting with %s", r.l.ID, queuedLease)
	}
	i := inspect(t, c, name)
	if !i.Held || i.Holder != "w0" {
		t.Fatalf("after the release: held %v by %q; want w0", i.Held, i.Holder)
	}
	check("Inspect after the first waiter took the lock", i, want[1:])
	watched(want[1:])
	for j := 1; j < n; j++ {
		release(t, c, r.l)
		r = await(t, chans[j], fmt.Sprintf("waiter w%d", j))
		if r.err != nil {
			t.Fatalf("waiter w%d: %v", j, r.err)
		}
	}
	release(t, c, r.l)
	if i := inspect(t, c, name); len(i.Queue) != 0 || i.Waiters != 0 {
		t.Errorf("after every waiter held and released: Waiters %d, Queue %+v; want none", i.Waiters, i.Queue)
	}
}
