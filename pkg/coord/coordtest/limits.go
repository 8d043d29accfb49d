package coordtest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/internal/coordkit"
)

// limiter returns c, skipping the case when it keeps no limits (a kit's
// own partial coordinator: Limits returns errors.ErrUnsupported).
func limiter(t testing.TB, c coord.Coordinator) coord.Coordinator {
	t.Helper()
	if _, err := c.Limits(ctx(t)); errors.Is(err, errors.ErrUnsupported) {
		t.Skip("the coordinator keeps no limits")
	}
	return c
}

func setLimit(t testing.TB, l coord.Coordinator, lim coord.Limit) {
	t.Helper()
	if err := l.SetLimit(ctx(t), lim); err != nil {
		t.Fatalf("SetLimit(%+v): %v", lim, err)
	}
}

func clearLimit(t testing.TB, l coord.Coordinator, name string, prefix bool) coord.Limit {
	t.Helper()
	old, ok, err := l.ClearLimit(ctx(t), name, prefix)
	if err != nil || !ok {
		t.Fatalf("ClearLimit(%q, prefix %v) = %v, %v; want the limit removed", name, prefix, ok, err)
	}
	return old
}

// wantFrozen checks that a try-lock of name fails with a *LimitError that
// is ErrBusy and names the freeze's reason and setter.
func wantFrozen(t testing.TB, c coord.Coordinator, name, reason, by string) {
	t.Helper()
	l, err := tryAcquire(t, c, name, coord.AcquireOptions{Holder: "try"})
	var le *coordkit.LimitError
	switch {
	case err == nil:
		release(t, c, l)
		t.Fatalf("Acquire(no wait) of frozen lock %q granted token %d", name, l.Token)
	case !errors.Is(err, coord.ErrBusy) || !errors.As(err, &le):
		t.Fatalf("Acquire(no wait) of frozen lock %q: %v; want a *coordkit.LimitError (ErrBusy)", name, err)
	case le.Limit.Max != 0 || le.Limit.Reason != reason || le.Limit.By != by:
		t.Fatalf("Acquire(no wait) of frozen lock %q: limit %+v; want frozen, reason %q by %q", name, le.Limit, reason, by)
	}
}

// limitFreeze: a freeze lets no new holder in, keeps the holder and the
// queue; a try-lock gets a LimitError with the reason and who froze it;
// Inspect shows it; a thaw serves the queued waiters in their order.
func (s *suite) limitFreeze(t *testing.T) {
	name := s.name(t, "freeze")
	c := s.client(t)
	lim := limiter(t, c)
	cx := ctx(t)
	holder := acquire(t, c, name, coord.AcquireOptions{Holder: "before-freeze", TTL: guard})
	setLimit(t, lim, coord.Limit{Name: name, Max: 0, Reason: "incident 42", By: "alice@ops"})
	wantHeldBy(t, c, holder)
	wantFrozen(t, s.client(t), name, "incident 42", "alice@ops")
	info := inspect(t, c, name)
	if info.Limit == nil || info.Limit.Max != 0 || info.Limit.Reason != "incident 42" {
		t.Errorf("Inspect of a frozen lock: Limit = %+v; want frozen with its reason", info.Limit)
	}
	const waiters = 3
	chans := make([]<-chan result, waiters)
	for i := range chans {
		queued := make(chan struct{})
		chans[i] = goAcquire(cx, s.client(t), name, coord.AcquireOptions{
			Holder: fmt.Sprintf("w%d", i), Wait: coord.WaitForever, OnWait: notify(queued)})
		signalled(t, queued, fmt.Sprintf("waiter %d queued", i))
	}
	release(t, c, holder)
	// Frozen and free: nobody takes it.
	for i, ch := range chans {
		select {
		case r := <-ch:
			t.Fatalf("waiter %d returned while the lock is frozen: lease %v, error %v", i, r.l, r.err)
		case <-time.After(300 * time.Millisecond / waiters):
		}
	}
	if info := inspect(t, c, name); info.Held || info.Waiters != waiters {
		t.Fatalf("frozen lock after the release: held %v, %d waiters; want free with %d waiters", info.Held, info.Waiters, waiters)
	}
	old := clearLimit(t, lim, name, false)
	if old.Max != 0 || old.By != "alice@ops" {
		t.Errorf("ClearLimit returned %+v, want the freeze", old)
	}
	last := holder.Token
	for i, ch := range chans {
		r := await(t, ch, fmt.Sprintf("waiter %d after the thaw", i))
		if r.err != nil {
			t.Fatalf("waiter %d after the thaw: %v", i, r.err)
		}
		if r.l.Holder != fmt.Sprintf("w%d", i) || r.l.Token <= last {
			t.Fatalf("grant %d after the thaw went to %s with token %d (previous %d); want w%d, in queue order", i, r.l.Holder, r.l.Token, last, i)
		}
		last = r.l.Token
		release(t, c, r.l)
	}
	if _, ok, err := lim.ClearLimit(cx, name, false); ok || err != nil {
		t.Errorf("ClearLimit of a lock without a limit = %v, %v; want false, nil", ok, err)
	}
}

// limitFrozenHeld (issue 30): a caller refused by a freeze of a lock that
// still has holders is told it is frozen, with the reason, not that it is
// held: a try-lock and a waiter whose budget ends, of a lock and of a
// semaphore whose slots are all taken.
func (s *suite) limitFrozenHeld(t *testing.T) {
	c := s.client(t)
	lim := limiter(t, c)
	for _, slots := range []int{1, 2} {
		name := s.name(t, fmt.Sprintf("frozenheld%d", slots))
		var held []*coord.Lease
		for i := 0; i < slots; i++ {
			held = append(held, acquire(t, c, name, coord.AcquireOptions{Holder: fmt.Sprintf("h%d", i), Slots: slots, TTL: guard}))
		}
		setLimit(t, lim, coord.Limit{Name: name, Max: 0, Reason: "incident 43", By: "bob@ops"})
		for _, wait := range []time.Duration{0, shortWait} {
			_, err := tryAcquire(t, s.client(t), name, coord.AcquireOptions{Holder: "late", Slots: slots, Wait: wait})
			var le *coordkit.LimitError
			if !errors.As(err, &le) || !errors.Is(err, coord.ErrBusy) || le.Limit.Max != 0 || le.Limit.Reason != "incident 43" ||
				!strings.Contains(err.Error(), "frozen") || !strings.Contains(err.Error(), "incident 43") {
				t.Errorf("Acquire(wait %v, %d slot(s)) of a frozen lock with holders: %v; want a *coordkit.LimitError saying frozen, with the reason", wait, slots, err)
			}
		}
		clearLimit(t, lim, name, false)
		for _, l := range held {
			release(t, c, l)
		}
	}
}

// limitPrefix: a freeze of a prefix covers a lock first used after it, and
// no lock outside it; the smallest limit binds; a lock-level thaw leaves
// the prefix's freeze; List shows the limits, and a lock frozen before its
// first use.
func (s *suite) limitPrefix(t *testing.T) {
	base := s.name(t, "")
	c := s.client(t)
	lim := limiter(t, c)
	setLimit(t, lim, coord.Limit{Name: base + "jobs/", Prefix: true, Reason: "disk full", By: "bob"})
	t.Cleanup(func() { _, _, _ = lim.ClearLimit(context.Background(), base+"jobs/", true) })
	wantFrozen(t, c, base+"jobs/new", "disk full", "bob")
	l := acquire(t, c, base+"jobsx", coord.AcquireOptions{}) // not under "jobs/"
	release(t, c, l)
	setLimit(t, lim, coord.Limit{Name: base + "jobs/new", Max: 1, By: "carol"})
	if li := inspect(t, c, base+"jobs/new"); li.Limit == nil || !li.Limit.Prefix || li.Limit.Max != 0 {
		t.Errorf("lock with limit 1 under a frozen prefix: Limit = %+v; want the prefix's freeze (the smallest binds)", li.Limit)
	}
	setLimit(t, lim, coord.Limit{Name: base + "other", Max: 0, By: "dave"})
	t.Cleanup(func() { _, _, _ = lim.ClearLimit(context.Background(), base+"other", false) })
	infos, err := c.List(ctx(t), base)
	if err != nil {
		t.Fatal(err)
	}
	var sawOther bool
	for _, i := range infos {
		if i.Name == base+"other" {
			sawOther = i.Limit != nil && i.Limit.Max == 0 && i.Limit.By == "dave"
		}
	}
	if !sawOther {
		t.Errorf("List(%q) = %+v; want %q (never used, frozen) listed with its limit", base, infos, base+"other")
	}
	clearLimit(t, lim, base+"jobs/new", false)
	wantFrozen(t, c, base+"jobs/new", "disk full", "bob")
	clearLimit(t, lim, base+"jobs/", true)
	l = acquire(t, c, base+"jobs/new", coord.AcquireOptions{})
	release(t, c, l)
	all, err := lim.Limits(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range all {
		if x.Name == base+"jobs/" || x.Name == base+"jobs/new" {
			t.Errorf("Limits after the thaws still has %+v", x)
		}
	}
}

// limitPersists: a limit survives a restart of the coordinator and new
// clients.
func (s *suite) limitPersists(t *testing.T) {
	name := s.name(t, "persist")
	lim := limiter(t, s.client(t))
	setLimit(t, lim, coord.Limit{Name: name, Max: 0, Reason: "kept", By: "erin"})
	s.restart(t)
	c := s.client(t)
	wantFrozen(t, c, name, "kept", "erin")
	clearLimit(t, limiter(t, c), name, false)
	l := acquire(t, c, name, coord.AcquireOptions{})
	release(t, c, l)
}

// limitUnderLoad: contenders take and release the lock in a loop; once
// SetLimit(freeze) has returned, no Acquire returns a lease other than the
// one held at that moment; after the thaw they go on.
func (s *suite) limitUnderLoad(t *testing.T) {
	const workers = 4
	name := s.name(t, "load")
	lim := limiter(t, s.client(t))
	cx, cancel := context.WithCancel(ctx(t))
	defer cancel()
	type grant struct {
		token    uint64
		acquired time.Time // Lease.AcquiredAt
		at       time.Time // when Acquire returned
	}
	var (
		mu     sync.Mutex
		grants []grant
		wg     sync.WaitGroup
	)
	for i := 0; i < workers; i++ {
		c := s.client(t)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for cx.Err() == nil {
				l, err := c.Acquire(cx, name, coord.AcquireOptions{Holder: fmt.Sprintf("load-%d", i), TTL: guard, Wait: coord.WaitForever})
				if err != nil {
					return
				}
				mu.Lock()
				grants = append(grants, grant{l.Token, l.AcquiredAt, time.Now()})
				mu.Unlock()
				time.Sleep(2 * time.Millisecond)
				_ = c.Release(context.Background(), name, l.ID)
			}
		}()
	}
	waitGrants := func(n int) {
		t.Helper()
		deadline := time.Now().Add(guard)
		for {
			mu.Lock()
			got := len(grants)
			mu.Unlock()
			if got >= n {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("only %d grants after %v, want %d", got, guard, n)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	waitGrants(20)
	c := s.client(t)
	setLimit(t, lim, coord.Limit{Name: name, Max: 0, Reason: "load", By: "frank"})
	frozenAt := time.Now()
	time.Sleep(500 * time.Millisecond)
	if cur := inspect(t, c, name); cur.Held {
		t.Errorf("500ms after the freeze (holds of 2ms): held by %s, token %d", cur.Holder, cur.Token)
	}
	// Only the lease granted before the freeze, in its Acquire's return,
	// may be seen after it: one at most, acquired before SetLimit returned.
	mu.Lock()
	var late []grant
	for _, g := range grants {
		if g.at.After(frozenAt) {
			late = append(late, g)
		}
	}
	n := len(grants)
	mu.Unlock()
	if len(late) > 1 || len(late) == 1 && late[0].acquired.After(frozenAt) {
		t.Fatalf("%d grant(s) returned after SetLimit(freeze) returned: first token %d acquired %v after the freeze, returned %v after it",
			len(late), late[0].token, late[0].acquired.Sub(frozenAt), late[0].at.Sub(frozenAt))
	}
	t.Logf("freeze under load: %d grants before it, %d returned in the 500ms after it (granted before it)", n, len(late))
	clearLimit(t, lim, name, false)
	waitGrants(n + 10)
	cancel()
	wg.Wait()
}

// limitWatch: Watch reports a change of the limit that binds a lock as it
// happens (EventLimit, with the new limit): a prefix freeze for a lock
// under it, a freeze of a lock never used (as List shows it), and their
// thaws; every other event carries the lock's limit.
func (s *suite) limitWatch(t *testing.T) {
	base := s.name(t, "")
	c := s.client(t)
	lim := limiter(t, c)
	// Not ctx(t): a missing event should fail at the guard saying what
	// was seen, not as a closed watch.
	wctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	events, err := c.Watch(wctx, base)
	if err != nil {
		t.Fatalf("Watch(%q): %v", base, err)
	}
	expect := func(what string, typ coord.EventType, name string, match func(*coord.Limit) bool) coord.LockInfo {
		t.Helper()
		timer := time.NewTimer(guard)
		defer timer.Stop()
		var seen []string
		for {
			select {
			case ev, ok := <-events:
				if !ok {
					t.Fatalf("%s: the watch closed", what)
				}
				seen = append(seen, fmt.Sprintf("%s %s limit %+v", ev.Type, ev.Info.Name, ev.Info.Limit))
				if (typ == "" || ev.Type == typ) && ev.Info.Name == name && match(ev.Info.Limit) && (typ != "" || len(ev.Info.Queue) == 1) {
					return ev.Info
				}
			case <-timer.C:
				t.Fatalf("%s: no %s event of %q within %v; saw %q", what, typ, name, guard, seen)
			}
		}
	}
	frozenBy := func(by string, prefix bool) func(*coord.Limit) bool {
		return func(l *coord.Limit) bool { return l != nil && l.Max == 0 && l.By == by && l.Prefix == prefix }
	}
	none := func(l *coord.Limit) bool { return l == nil }

	held := base + "jobs/held"
	l := acquire(t, c, held, coord.AcquireOptions{Holder: "h", TTL: guard})
	expect("the acquisition", coord.EventAcquired, held, none)
	setLimit(t, lim, coord.Limit{Name: base + "jobs/", Prefix: true, By: "alice"})
	t.Cleanup(func() { _, _, _ = lim.ClearLimit(context.Background(), base+"jobs/", true) })
	if i := expect("a prefix freeze", coord.EventLimit, held, frozenBy("alice", true)); !i.Held || i.Token != l.Token {
		t.Errorf("the limit event of a held lock: held %v, token %d; want held under token %d", i.Held, i.Token, l.Token)
	}
	release(t, c, l)
	expect("the release of a frozen lock", coord.EventReleased, held, frozenBy("alice", true))

	unused := base + "unused"
	setLimit(t, lim, coord.Limit{Name: unused, By: "bob"})
	t.Cleanup(func() { _, _, _ = lim.ClearLimit(context.Background(), unused, false) })
	expect("a freeze of a lock never used", coord.EventLimit, unused, frozenBy("bob", false))
	clearLimit(t, lim, unused, false)
	expect("its thaw", coord.EventLimit, unused, none)

	// A waiter queued on the frozen lock: the event that shows it queued
	// (etcd: its key may read as a holder until it marks itself held back)
	// carries the limit; the thaw's event comes before the grant.
	w := goAcquire(ctx(t), s.client(t), held, coord.AcquireOptions{Holder: "w", Wait: coord.WaitForever})
	expect("a waiter on a frozen lock", "", held, frozenBy("alice", true))
	clearLimit(t, lim, base+"jobs/", true)
	expect("the prefix's thaw", coord.EventLimit, held, none)
	r := await(t, w, "the waiter after the thaw")
	if r.err != nil {
		t.Fatalf("the waiter after the thaw: %v", r.err)
	}
	expect("the waiter's grant", coord.EventAcquired, held, none)
	release(t, c, r.l)
}
