package fencing_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/fence-dev/fence/internal/etcdtest"
	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/coord/etcd"
	"github.com/fence-dev/fence/pkg/coord/local"
	"github.com/fence-dev/fence/pkg/fencing"
)

// hang bounds every wait in these tests; it is never a timing assertion.
const hang = 20 * time.Second

func openLocal(t *testing.T) coord.Coordinator {
	t.Helper()
	c, err := local.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func openEtcd(t *testing.T) coord.Coordinator {
	t.Helper()
	srv := etcdtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), hang)
	defer cancel()
	c, err := etcd.New(ctx, srv.Endpoints(), etcd.WithPrefix("/fence-test/"), etcd.WithDialTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

var backends = []struct {
	name string
	open func(*testing.T) coord.Coordinator
}{{"local", openLocal}, {"etcd", openEtcd}}

func lostReason(t *testing.T, h *fencing.Held) fencing.Reason {
	t.Helper()
	select {
	case <-h.Context().Done():
	case <-time.After(hang):
		t.Fatal("the hold's context was not cancelled")
	}
	cause := context.Cause(h.Context())
	var le *fencing.LostError
	if !errors.As(cause, &le) {
		t.Fatalf("cause = %v (%T), want a *LostError", cause, cause)
	}
	if !errors.Is(cause, coord.ErrLeaseLost) {
		t.Fatalf("cause %v does not wrap coord.ErrLeaseLost", cause)
	}
	if context.Cause(h.Context()) != cause {
		t.Fatalf("Err() = %v, want the context's cause", context.Cause(h.Context()))
	}
	return le.Reason
}

// TestHoldKeepsLease holds a short lease for several TTLs on both backends:
// it stays ours, the safe-until moves forward, and Release frees the lock.
func TestHoldKeepsLease(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			c := b.open(t)
			ctx := context.Background()
			var mu sync.Mutex
			var extensions int
			h, err := fencing.Acquire(ctx, c, "keep", coord.AcquireOptions{TTL: time.Second},
				fencing.Opts(fencing.HoldOptions{OnRenewal: func(_ *fencing.Held, err error) {
					if err == nil {
						mu.Lock()
						extensions++
						mu.Unlock()
					}
				}}))
			if err != nil {
				t.Fatal(err)
			}
			first := h.Stats().SafeUntilBoot
			time.Sleep(2500 * time.Millisecond) // 2.5 TTLs: the lease would have expired unrenewed
			if err := context.Cause(h.Context()); err != nil {
				t.Fatalf("hold ended: %v", err)
			}
			info, err := c.Inspect(ctx, "keep")
			if err != nil {
				t.Fatal(err)
			}
			if !info.Held || info.Token != h.Token() || info.LeaseID != h.Lease().ID {
				t.Fatalf("lock after 2.5 TTLs: %+v, want held by token %d", info, h.Token())
			}
			st := h.Stats()
			mu.Lock()
			n := extensions
			mu.Unlock()
			if st.Renewals < 2 || n < 2 || st.SafeUntilBoot <= first {
				t.Fatalf("renewals %d, extensions %d, safe-until moved %v", st.Renewals, n, st.SafeUntilBoot.Sub(first))
			}
			if err := h.Release(ctx); err != nil {
				t.Fatal(err)
			}
			if !errors.Is(context.Cause(h.Context()), fencing.ErrReleased) {
				t.Fatalf("cause after Release = %v", context.Cause(h.Context()))
			}
			if err := h.Release(ctx); err != nil {
				t.Fatalf("second Release: %v", err)
			}
			if info, err := c.Inspect(ctx, "keep"); err != nil || info.Held {
				t.Fatalf("after Release: %+v, %v", info, err)
			}
		})
	}
}

// TestRevokeCancels: a revoked lease is reported by the next renewal, so the
// context ends within about one renew interval, long before safe-until.
func TestRevokeCancels(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			c := b.open(t)
			ctx := context.Background()
			const interval = 100 * time.Millisecond
			h, err := fencing.Acquire(ctx, c, "revoke", coord.AcquireOptions{TTL: 30 * time.Second},
				fencing.Opts(fencing.HoldOptions{RenewInterval: interval}))
			if err != nil {
				t.Fatal(err)
			}
			defer h.Release(ctx)
			if _, err := c.Revoke(ctx, "revoke"); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			if r := lostReason(t, h); r != fencing.Lost {
				t.Fatalf("reason %v, want lost", r)
			}
			// Safe-until is ~27s away: only the renewal can have noticed.
			if d := time.Since(start); d > 10*time.Second {
				t.Fatalf("revoke noticed after %v", d)
			}
			t.Logf("revoke noticed after %v (renew interval %v)", time.Since(start).Round(time.Millisecond), interval)
		})
	}
}

// faulty wraps a real coordinator to inject the faults that cannot be made
// real in a unit test: renewals that fail, or that hang until let go.
type faulty struct {
	coord.Coordinator
	active  atomic.Int32 // Renew calls in progress
	mu      sync.Mutex
	fail    error         // Renew returns it without asking the backend
	gate    chan struct{} // Renew waits for it to close before asking
	renewed chan struct{} // a token per Renew call that reached the backend
}

func (f *faulty) Renew(ctx context.Context, name, id string) (coord.Renewal, error) {
	f.active.Add(1)
	defer f.active.Add(-1)
	f.mu.Lock()
	fail, gate := f.fail, f.gate
	f.mu.Unlock()
	if fail != nil {
		return coord.Renewal{}, fail
	}
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return coord.Renewal{}, ctx.Err()
		}
	}
	r, err := f.Coordinator.Renew(ctx, name, id)
	if f.renewed != nil {
		select {
		case f.renewed <- struct{}{}:
		default:
		}
	}
	return r, err
}

// fakeHold acquires a real lease (long TTL) and holds it on a fake clock
// set at the lease's send time.
func fakeHold(t *testing.T, c coord.Coordinator, ttl time.Duration, opts fencing.HoldOptions) (*fencing.Held, *clockwork.FakeClock) {
	t.Helper()
	l, err := c.Acquire(context.Background(), "fake", coord.AcquireOptions{TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	fc := clockwork.NewFakeClockAt(l.Sent)
	h, err := fencing.HoldOn(context.Background(), c, l, opts, fc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Release(context.Background()) })
	return h, fc
}

// stepUntilLost advances fc by d each time the hold's loop waits on its
// timer with no renewal in progress, until the hold ends. Renewals run on
// goroutines in real time: the short real pause before each step lets one
// that was just started reach the coordinator (a step taken before it does
// only delays that attempt).
func stepUntilLost(t *testing.T, h *fencing.Held, c *faulty, fc *clockwork.FakeClock, d time.Duration) {
	t.Helper()
	end := time.Now().Add(hang)
	for context.Cause(h.Context()) == nil {
		if time.Now().After(end) {
			t.Fatal("the hold did not end")
		}
		ctx, cancel := context.WithTimeout(h.Context(), time.Second)
		err := fc.BlockUntilContext(ctx, 1)
		cancel()
		if err != nil {
			continue
		}
		time.Sleep(time.Millisecond)
		for c.active.Load() > 0 && time.Now().Before(end) {
			time.Sleep(time.Millisecond)
		}
		fc.Advance(d)
	}
}

// TestPausedPastSafeUntil: the process "sleeps" (the fake clock jumps) past
// safe-until. The lease is in fact still alive on the coordinator, and a
// renewal would succeed, yet the hold must end: for all it knows, another
// holder worked in between.
func TestPausedPastSafeUntil(t *testing.T) {
	c := &faulty{Coordinator: openLocal(t)}
	h, fc := fakeHold(t, c, time.Minute, fencing.HoldOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), hang)
	defer cancel()
	if err := fc.BlockUntilContext(ctx, 1); err != nil {
		t.Fatal(err)
	}
	fc.Advance(2 * time.Minute)
	if r := lostReason(t, h); r != fencing.Paused {
		t.Fatalf("reason %v, want paused", r)
	}
	var le *fencing.LostError
	errors.As(context.Cause(h.Context()), &le)
	if le.Late < time.Minute {
		t.Fatalf("Late = %v, want about a minute", le.Late)
	}
	if info, _ := c.Inspect(context.Background(), "fake"); !info.Held {
		t.Fatal("the real lease should still be alive: this test proves nothing")
	}
}

// TestLateAcknowledgmentIsRefused: a renewal is in flight while the process
// is paused past safe-until; its acknowledgment arrives after the wake-up
// and must not extend the lease.
func TestLateAcknowledgmentIsRefused(t *testing.T) {
	gate := make(chan struct{})
	c := &faulty{Coordinator: openLocal(t), gate: gate, renewed: make(chan struct{}, 1)}
	const ttl = 30 * time.Second
	h, fc := fakeHold(t, c, ttl, fencing.HoldOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), hang)
	defer cancel()
	su := h.Stats().SafeUntil
	// Step to the first renewal (TTL/3): it goes out and hangs at the gate.
	for fc.Since(h.Lease().Sent) < ttl/3 {
		if err := fc.BlockUntilContext(ctx, 1); err != nil {
			t.Fatal(err)
		}
		fc.Advance(50 * time.Millisecond)
	}
	// Pause: jump far past safe-until, then let the renewal succeed.
	if err := fc.BlockUntilContext(ctx, 1); err != nil {
		t.Fatal(err)
	}
	fc.Advance(ttl)
	close(gate)
	if r := lostReason(t, h); r != fencing.Paused {
		t.Fatalf("reason %v, want paused", r)
	}
	if got := h.Stats().SafeUntil; !got.Equal(su) {
		t.Fatalf("safe-until moved by %v after the late acknowledgment", got.Sub(su))
	}
	// The late renewal may still be writing the lock file: let it end
	// before the state directory is removed.
	for deadline := time.Now().Add(hang); c.active.Load() > 0 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
}

// TestUnsafeWhenRenewalsFail: every renewal fails (coordinator unreachable);
// time passes in small steps; the hold ends at safe-until, as unsafe, with
// the failures counted and reported.
func TestUnsafeWhenRenewalsFail(t *testing.T) {
	unreachable := errors.New("connection refused")
	c := &faulty{Coordinator: openLocal(t), fail: unreachable}
	var mu sync.Mutex
	var reported []int
	const ttl = 3 * time.Second
	h, fc := fakeHold(t, c, ttl, fencing.HoldOptions{OnRenewal: func(h *fencing.Held, err error) {
		mu.Lock()
		reported = append(reported, h.Stats().Consecutive)
		mu.Unlock()
	}})
	su := h.Stats().SafeUntil
	stepUntilLost(t, h, c, fc, 20*time.Millisecond)
	if r := lostReason(t, h); r != fencing.Unsafe {
		t.Fatalf("reason %v, want unsafe", r)
	}
	var le *fencing.LostError
	errors.As(context.Cause(h.Context()), &le)
	if le.Failures < 2 || !errors.Is(le.LastErr, unreachable) || !le.SafeUntil.Equal(su) {
		t.Fatalf("LostError %+v: want ≥2 failures, the last error, the original safe-until", le)
	}
	// It ended at safe-until, not before: the fake clock is past it by at
	// most one step.
	if late := le.Late; late <= 0 || late > 20*time.Millisecond {
		t.Fatalf("ended %v past safe-until", late)
	}
	st := h.Stats()
	mu.Lock()
	defer mu.Unlock()
	if st.Renewals != 0 || st.Failures != len(reported) || reported[len(reported)-1] != st.Consecutive {
		t.Fatalf("stats %+v, reported %v", st, reported)
	}
}

// TestNoRenew: a fixed lease is never renewed and ends at its safe-until.
func TestNoRenew(t *testing.T) {
	c := &faulty{Coordinator: openLocal(t), renewed: make(chan struct{}, 1)}
	h, fc := fakeHold(t, c, 10*time.Second, fencing.HoldOptions{NoRenew: true, Margin: time.Second})
	stepUntilLost(t, h, c, fc, 50*time.Millisecond)
	if r := lostReason(t, h); r != fencing.Unsafe {
		t.Fatalf("reason %v", r)
	}
	select {
	case <-c.renewed:
		t.Fatal("a no-renew hold renewed")
	default:
	}
	if got := fc.Since(h.Lease().Sent); got < 9*time.Second || got > 9*time.Second+100*time.Millisecond {
		t.Fatalf("ended %v after the grant, want TTL-margin = 9s", got)
	}
}

func TestHoldRefusesUnsafeOptions(t *testing.T) {
	c := openLocal(t)
	ctx := context.Background()
	cases := []struct {
		name string
		ttl  time.Duration
		o    fencing.HoldOptions
	}{
		{"margin eats the TTL", time.Second, fencing.HoldOptions{Margin: time.Second}},
		{"one renewal only", 3 * time.Second, fencing.HoldOptions{RenewInterval: 1400 * time.Millisecond}},
		{"negative", time.Second, fencing.HoldOptions{RetryInterval: -1}},
	}
	for _, tc := range cases {
		_, err := fencing.Acquire(ctx, c, "opts", coord.AcquireOptions{TTL: tc.ttl}, fencing.Opts(tc.o))
		if !errors.Is(err, coord.ErrInvalid) {
			t.Errorf("%s: err = %v, want ErrInvalid", tc.name, err)
		}
	}
	if info, _ := c.Inspect(ctx, "opts"); info.Held {
		t.Fatal("a refused hold left the lock held")
	}
	if _, err := fencing.Hold(ctx, c, nil, fencing.Opts(fencing.HoldOptions{})); !errors.Is(err, coord.ErrInvalid) {
		t.Fatalf("Hold(nil) = %v", err)
	}
}

// TestHoldWithoutSent renews once to learn a send time (a lease known only
// by its id, as `fence acquire` prints it).
func TestHoldWithoutSent(t *testing.T) {
	c := openLocal(t)
	ctx := context.Background()
	l, err := c.Acquire(ctx, "nosent", coord.AcquireOptions{TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	bare := &coord.Lease{Name: l.Name, ID: l.ID, Token: l.Token, TTL: l.TTL}
	h, err := fencing.Hold(ctx, c, bare, fencing.Opts(fencing.HoldOptions{}))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release(ctx)
	if left := time.Until(h.Stats().SafeUntil); left < 8*time.Second || left > 9*time.Second+time.Millisecond {
		t.Fatalf("safe-until %v away, want about TTL-margin", left)
	}
	if _, err := c.Revoke(ctx, "nosent"); err != nil {
		t.Fatal(err)
	}
	if _, err := fencing.Hold(ctx, c, bare, fencing.Opts(fencing.HoldOptions{})); !errors.Is(err, coord.ErrLeaseLost) {
		t.Fatalf("Hold of a revoked lease = %v, want ErrLeaseLost", err)
	}
}

// TestParentContextEndsHold: the hold stops with the context given to it.
func TestParentContextEndsHold(t *testing.T) {
	c := openLocal(t)
	ctx, cancel := context.WithCancelCause(context.Background())
	h, err := fencing.Acquire(ctx, c, "parent", coord.AcquireOptions{TTL: 10 * time.Second}, fencing.Opts(fencing.HoldOptions{}))
	if err != nil {
		t.Fatal(err)
	}
	stop := errors.New("shutting down")
	cancel(stop)
	<-h.Context().Done()
	if !errors.Is(context.Cause(h.Context()), stop) {
		t.Fatalf("cause %v", context.Cause(h.Context()))
	}
	if err := h.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestCheck: a process resumed past safe-until learns it from Check at once,
// before the renewal loop has run.
func TestCheck(t *testing.T) {
	c := &faulty{Coordinator: openLocal(t)}
	h, fc := fakeHold(t, c, time.Minute, fencing.HoldOptions{})
	if err := h.Check(); err != nil {
		t.Fatalf("Check of a fresh hold: %v", err)
	}
	fc.Advance(2 * time.Minute) // the loop may not have run yet
	err := h.Check()
	var le *fencing.LostError
	if !errors.As(err, &le) || le.Reason != fencing.Paused {
		t.Fatalf("Check after the jump = %v, want paused", err)
	}
	if h.Context().Err() == nil {
		t.Fatal("Check did not cancel the context")
	}
}
