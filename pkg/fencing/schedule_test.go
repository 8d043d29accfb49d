package fencing_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/fencing"
)

// hangOne wraps a real coordinator: the renewals of lock hang (until
// abandoned) and never reach the backend; the others do. active counts the
// renewals in progress that do not hang.
type hangOne struct {
	coord.Coordinator
	lock   string
	hung   atomic.Int32 // renewals of lock waiting now
	active atomic.Int32
}

func (f *hangOne) Renew(ctx context.Context, name, id string) (coord.Renewal, error) {
	if name == f.lock {
		f.hung.Add(1)
		defer f.hung.Add(-1)
		<-ctx.Done()
		return coord.Renewal{}, ctx.Err()
	}
	f.active.Add(1)
	defer f.active.Add(-1)
	return f.Coordinator.Renew(ctx, name, id)
}

// holdAt acquires lock on c with a real TTL and holds it on fc, as granted
// at fc's present.
func holdAt(t *testing.T, c coord.Coordinator, fc *clockwork.FakeClock, lock string, ttl time.Duration, opts fencing.HoldOptions) *fencing.Held {
	t.Helper()
	l, err := c.Acquire(context.Background(), lock, coord.AcquireOptions{TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	l.Sent = fc.Now()
	h, err := fencing.HoldOn(context.Background(), c, l, opts, fc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Release(context.Background()) })
	return h
}

// stepUntil advances fc by d each time the scheduler sleeps on its timer
// and no renewal that can finish is in progress, until done holds.
func stepUntil(t *testing.T, fc *clockwork.FakeClock, active func() int32, d time.Duration, what string, done func() bool) {
	t.Helper()
	end := time.Now().Add(hang)
	for !done() {
		if time.Now().After(end) {
			t.Fatalf("%s: did not happen", what)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := fc.BlockUntilContext(ctx, 1)
		cancel()
		if err != nil {
			continue
		}
		time.Sleep(time.Millisecond)
		for active() > 0 && time.Now().Before(end) {
			time.Sleep(time.Millisecond)
		}
		fc.Advance(d)
	}
}

func lostErr(t *testing.T, h *fencing.Held) *fencing.LostError {
	t.Helper()
	var le *fencing.LostError
	if !errors.As(context.Cause(h.Context()), &le) {
		t.Fatalf("hold on %q: cause %v, want a *LostError", h.Lease().Name, context.Cause(h.Context()))
	}
	return le
}

// TestSchedulerIsolatesHolds: many holds on one clock share one scheduler.
// The renewals of one lease hang; meanwhile a second hold (not renewed)
// ends exactly at its safe-until, the others keep renewing, and the hung
// hold ends at its own safe-until, its hanging renewals abandoned and
// counted. Then a revoked lease is reported lost by its next renewal while
// the others go on.
func TestSchedulerIsolatesHolds(t *testing.T) {
	c := &hangOne{Coordinator: openLocal(t), lock: "hang"}
	fc := clockwork.NewFakeClockAt(time.Now())
	const step = 80 * time.Millisecond // under pauseTolerance: a step is not a pause
	const ttl = time.Minute            // margin 2s: safe-until 58s after the grant
	hung := holdAt(t, c, fc, "hang", ttl, fencing.HoldOptions{})
	// Not renewed, safe-until 28s: it ends while hung's first renewal
	// (sent at 20s, abandoned at 40s) hangs.
	fixed := holdAt(t, c, fc, "fixed", 30*time.Second, fencing.HoldOptions{NoRenew: true})
	var ok []*fencing.Held
	for i := range 5 {
		ok = append(ok, holdAt(t, c, fc, fmt.Sprintf("ok%d", i), ttl, fencing.HoldOptions{}))
	}
	revoked := holdAt(t, c, fc, "revoked", ttl, fencing.HoldOptions{})
	start := fc.Now()
	active := func() int32 { return c.active.Load() }

	stepUntil(t, fc, active, step, "the fixed hold's end", func() bool { return context.Cause(fixed.Context()) != nil })
	if le := lostErr(t, fixed); le.Reason != fencing.Unsafe || !le.NoRenew || le.Late <= 0 || le.Late > step {
		t.Fatalf("fixed hold: %+v, want unsafe at its safe-until (within one step)", le)
	}
	if c.hung.Load() == 0 || context.Cause(hung.Context()) != nil {
		t.Fatalf("when the fixed hold ended, the hung renewal should be in progress (hung %d, err %v): this test proves nothing",
			c.hung.Load(), context.Cause(hung.Context()))
	}

	su := hung.Stats().SafeUntil
	stepUntil(t, fc, active, step, "the hung hold's end", func() bool { return context.Cause(hung.Context()) != nil })
	le := lostErr(t, hung)
	if le.Reason != fencing.Unsafe || le.Late <= 0 || le.Late > step || !le.SafeUntil.Equal(su) {
		t.Fatalf("hung hold: %+v, want unsafe at its safe-until %v (within one step)", le, su)
	}
	if st := hung.Stats(); st.Renewals != 0 || st.Failures < 2 || !errors.Is(st.LastError, context.Canceled) {
		t.Fatalf("hung hold's stats %+v: want ≥2 abandoned renewals, none acknowledged", st)
	}
	for _, h := range append(ok, revoked) {
		if err := context.Cause(h.Context()); err != nil {
			t.Fatalf("hold on %q ended with the hung one: %v", h.Lease().Name, err)
		}
		if st := h.Stats(); st.Renewals < 2 || !st.SafeUntil.After(su) {
			t.Fatalf("hold on %q did not keep renewing while another hung: %+v", h.Lease().Name, st)
		}
	}

	if _, err := c.Revoke(context.Background(), "revoked"); err != nil {
		t.Fatal(err)
	}
	stepUntil(t, fc, active, step, "the revoked hold's end", func() bool { return context.Cause(revoked.Context()) != nil })
	if le := lostErr(t, revoked); le.Reason != fencing.Lost {
		t.Fatalf("revoked hold: %+v, want lost", le)
	}
	for _, h := range ok {
		if err := context.Cause(h.Context()); err != nil {
			t.Fatalf("hold on %q ended with the revoked one: %v", h.Lease().Name, err)
		}
		if info, err := c.Inspect(context.Background(), h.Lease().Name); err != nil || !info.Held || info.Token != h.Token() {
			t.Fatalf("lock %q: %+v, %v: want still held", h.Lease().Name, info, err)
		}
	}
	t.Logf("ran %v of fake time", fc.Since(start))
}

// hangFake is a coordinator over a real one whose renewals of lock hang
// until they are abandoned (their ctx ends); the others are answered by
// the real backend.
type hangFake struct {
	coord.Coordinator
	lock     string
	hung     atomic.Int32 // renewals of lock not abandoned yet
	active   atomic.Int32
	canceled atomic.Int32 // abandoned renewals of lock
}

func (a *hangFake) Renew(ctx context.Context, name, id string) (coord.Renewal, error) {
	if name == a.lock {
		a.hung.Add(1)
		<-ctx.Done()
		a.hung.Add(-1)
		a.canceled.Add(1)
		return coord.Renewal{}, fmt.Errorf("abandoned: %w", context.Cause(ctx))
	}
	a.active.Add(1)
	defer a.active.Add(-1)
	return a.Coordinator.Renew(ctx, name, id)
}

// TestUnansweredRenewal: a renewal that is never answered is cancelled
// when it is abandoned, and its hold ends at its safe-until while another
// keeps renewing.
func TestUnansweredRenewal(t *testing.T) {
	c := &hangFake{Coordinator: openLocal(t), lock: "silent"}
	fc := clockwork.NewFakeClockAt(time.Now())
	const step = 80 * time.Millisecond
	var mu sync.Mutex
	var failures []int
	silent := holdAt(t, c, fc, "silent", 30*time.Second, fencing.HoldOptions{
		OnRenewal: func(h *fencing.Held, err error) {
			mu.Lock()
			failures = append(failures, h.Stats().Consecutive)
			mu.Unlock()
		},
	})
	answered := holdAt(t, c, fc, "answered", 30*time.Second, fencing.HoldOptions{})
	su := silent.Stats().SafeUntil
	stepUntil(t, fc, func() int32 { return c.active.Load() }, step, "the silent hold's end", func() bool { return context.Cause(silent.Context()) != nil })
	le := lostErr(t, silent)
	if le.Reason != fencing.Unsafe || le.Late <= 0 || le.Late > step || !le.SafeUntil.Equal(su) {
		t.Fatalf("silent hold: %+v, want unsafe at its safe-until %v", le, su)
	}
	// Every renewal of the silent lease was cancelled (the last one when the
	// hold ended, possibly just after).
	deadline := time.Now().Add(hang)
	for c.hung.Load() > 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	st := silent.Stats()
	mu.Lock()
	n := len(failures)
	mu.Unlock()
	if c.hung.Load() != 0 || c.canceled.Load() < 2 || st.Failures < 1 || st.Failures != n || st.Renewals != 0 {
		t.Fatalf("hung %d, cancelled %d, stats %+v, %d failures reported: want every renewal cancelled, each abandoned one reported",
			c.hung.Load(), c.canceled.Load(), st, n)
	}
	if err := context.Cause(answered.Context()); err != nil {
		t.Fatalf("the answered hold ended: %v", err)
	}
	if st := answered.Stats(); st.Renewals < 2 || !st.SafeUntil.After(su) {
		t.Fatalf("answered hold: %+v, want renewals past the silent one's safe-until", st)
	}
}

// TestManyHoldsEtcd: many leases held on one etcd Coordinator stay held for several TTLs; a revoked
// one is reported lost while the others go on.
func TestManyHoldsEtcd(t *testing.T) {
	c := openEtcd(t)
	ctx := context.Background()
	const n = 50
	helds := make([]*fencing.Held, n)
	for i := range helds {
		h, err := fencing.Acquire(ctx, c, fmt.Sprintf("many/%02d", i), coord.AcquireOptions{TTL: 2 * time.Second}, fencing.Opts(fencing.HoldOptions{}))
		if err != nil {
			t.Fatal(err)
		}
		defer h.Release(ctx)
		helds[i] = h
	}
	ttl := helds[0].Lease().TTL
	time.Sleep(3 * ttl) // unrenewed, every lease would have expired
	for _, h := range helds {
		if err := context.Cause(h.Context()); err != nil {
			t.Fatalf("hold on %q ended: %v", h.Lease().Name, err)
		}
		if st := h.Stats(); st.Renewals < 2 {
			t.Fatalf("hold on %q: %+v, want renewals", h.Lease().Name, st)
		}
	}
	if _, err := c.Revoke(ctx, helds[7].Lease().Name); err != nil {
		t.Fatal(err)
	}
	if r := lostReason(t, helds[7]); r != fencing.Lost {
		t.Fatalf("revoked hold: reason %v, want lost", r)
	}
	for i, h := range helds {
		if i == 7 {
			continue
		}
		if err := context.Cause(h.Context()); err != nil {
			t.Fatalf("hold on %q ended with the revoked one: %v", h.Lease().Name, err)
		}
	}
}
