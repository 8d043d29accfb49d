package fencing_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fence-dev/fence/internal/clock"
	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/fencing"
)

// callLog is a coordinator that logs the Acquire and Release calls it
// passes on.
type callLog struct {
	coord.Coordinator
	mu    sync.Mutex
	calls []string
}

func (l *callLog) Acquire(ctx context.Context, name string, o coord.AcquireOptions) (*coord.Lease, error) {
	l.mu.Lock()
	l.calls = append(l.calls, "acquire "+name)
	l.mu.Unlock()
	return l.Coordinator.Acquire(ctx, name, o)
}

func (l *callLog) Release(ctx context.Context, name, id string) error {
	l.mu.Lock()
	l.calls = append(l.calls, "release "+name)
	l.mu.Unlock()
	return l.Coordinator.Release(ctx, name, id)
}

func (l *callLog) log() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := slices.Clone(l.calls)
	l.calls = nil
	return out
}

// TestAcquireSetOrder: the locks are taken in byte order of their names
// whatever the order given ("B" < "a" < "a/b" < "ab" < "b"), released in
// the reverse order, and Helds and Leases keep the order given.
func TestAcquireSetOrder(t *testing.T) {
	ctx := context.Background()
	c := &callLog{Coordinator: openLocal(t)}
	names := []string{"b", "a/b", "B", "ab", "a"}
	s, err := fencing.AcquireSet(ctx, c, names, coord.AcquireOptions{TTL: 10 * time.Second}, fencing.Opts(fencing.HoldOptions{}))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := c.log(), []string{"acquire B", "acquire a", "acquire a/b", "acquire ab", "acquire b"}; !slices.Equal(got, want) {
		t.Fatalf("calls %q, want %q", got, want)
	}
	for i, l := range s.Leases() {
		if l.Name != names[i] || s.Helds()[i].Lease().ID != l.ID || s.Held(names[i]).Token() != l.Token {
			t.Fatalf("lease %d is %+v, want lock %q", i, l, names[i])
		}
	}
	if err := s.Check(); err != nil || s.Err() != nil {
		t.Fatalf("Check %v, Err %v", err, s.Err())
	}
	if err := s.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if got, want := c.log(), []string{"release b", "release ab", "release a/b", "release a", "release B"}; !slices.Equal(got, want) {
		t.Fatalf("calls %q, want %q", got, want)
	}
	if !errors.Is(context.Cause(s.Context()), fencing.ErrReleased) {
		t.Fatalf("cause after Release: %v", context.Cause(s.Context()))
	}
	for _, n := range names {
		if info, err := c.Inspect(ctx, n); err != nil || info.Held {
			t.Fatalf("%s after Release: %+v, %v", n, info, err)
		}
	}
	if _, err := fencing.AcquireSet(ctx, c, []string{"a", "b", "a"}, coord.AcquireOptions{TTL: 10 * time.Second}, fencing.Opts(fencing.HoldOptions{})); !errors.Is(err, coord.ErrInvalid) {
		t.Fatalf("a lock named twice: %v, want ErrInvalid", err)
	}
	if _, err := fencing.AcquireSet(ctx, c, []string{"a", ""}, coord.AcquireOptions{TTL: 10 * time.Second}, fencing.Opts(fencing.HoldOptions{})); !errors.Is(err, coord.ErrInvalid) {
		t.Fatalf("an empty name: %v, want ErrInvalid", err)
	}
	if got := c.log(); len(got) != 0 {
		t.Fatalf("invalid sets took locks: %q", got)
	}
}

// TestAcquireSetAllOrNone: one lock of the set is busy: the error names it
// and wraps ErrBusy, the locks taken before it are released (in reverse),
// those after it were never asked for, and the wait for the set as a whole
// is bounded by Wait.
func TestAcquireSetAllOrNone(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			ctx := context.Background()
			base := b.open(t)
			c := &callLog{Coordinator: base}
			other, err := base.Acquire(ctx, "c", coord.AcquireOptions{TTL: 30 * time.Second, Holder: "other"})
			if err != nil {
				t.Fatal(err)
			}
			for _, wait := range []time.Duration{0, 1500 * time.Millisecond} {
				start := time.Now()
				_, err := fencing.AcquireSet(ctx, c, []string{"d", "b", "c", "a"}, coord.AcquireOptions{TTL: 10 * time.Second, Wait: wait}, fencing.Opts(fencing.HoldOptions{}))
				took := time.Since(start)
				var se *fencing.SetError
				if !errors.As(err, &se) || se.Lock != "c" || !errors.Is(err, coord.ErrBusy) {
					t.Fatalf("wait %v: %v, want a SetError naming c, wrapping ErrBusy", wait, err)
				}
				if got, want := c.log(), []string{"acquire a", "acquire b", "acquire c", "release b", "release a"}; !slices.Equal(got, want) {
					t.Fatalf("wait %v: calls %q, want %q", wait, got, want)
				}
				if took < wait || took > wait+hang/2 {
					t.Fatalf("wait %v: gave up after %v", wait, took)
				}
				for _, n := range []string{"a", "b", "d"} {
					if info, err := base.Inspect(ctx, n); err != nil || info.Held {
						t.Fatalf("%s after the failure: %+v, %v", n, info, err)
					}
				}
			}
			_ = base.Release(ctx, "c", other.ID)
		})
	}
}

// TestAcquireSetLoss: the set's context ends when any one lease is lost,
// with that lease's LostError; a lease lost while a later lock is waited
// for ends the wait (the error names the lock waited for and the lost one).
func TestAcquireSetLoss(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			ctx := context.Background()
			c := b.open(t)
			var su atomic.Int64
			var calls atomic.Int32
			s, err := fencing.AcquireSet(ctx, c, []string{"x", "y", "z"}, coord.AcquireOptions{TTL: 30 * time.Second},
				fencing.WithRenewInterval(200*time.Millisecond), fencing.OnRenewed(func(h *fencing.Held) {
					b := h.Stats().SafeUntilBoot
					if int64(b) <= su.Swap(int64(b)) {
						t.Errorf("safe-until did not move later")
					}
					calls.Add(1)
				}))
			if err != nil {
				t.Fatal(err)
			}
			defer s.Release(ctx)
			deadline := time.Now().Add(hang)
			for calls.Load() < 2 && time.Now().Before(deadline) {
				time.Sleep(20 * time.Millisecond)
			}
			if calls.Load() < 2 || clock.Boot(su.Load()) > s.Earliest().Stats().SafeUntilBoot {
				t.Fatalf("OnRenewed called %d times", calls.Load())
			}
			if _, err := c.Revoke(ctx, "y"); err != nil {
				t.Fatal(err)
			}
			select {
			case <-s.Context().Done():
			case <-time.After(hang):
				t.Fatal("the set's context did not end")
			}
			var le *fencing.LostError
			if !errors.As(context.Cause(s.Context()), &le) || le.Lock != "y" || !errors.Is(s.Err(), coord.ErrLeaseLost) {
				t.Fatalf("cause %v, want y's LostError", context.Cause(s.Context()))
			}
			if s.Held("x").Err() != nil || s.Held("z").Err() != nil {
				t.Fatalf("the other holds ended: %v, %v", s.Held("x").Err(), s.Held("z").Err())
			}
			if err := s.Release(ctx); err != nil {
				t.Fatal(err)
			}

			// Lost while waiting: "q" is held elsewhere; "p" (taken first)
			// is revoked while the set waits for "q".
			other, err := c.Acquire(ctx, "q", coord.AcquireOptions{TTL: 30 * time.Second, Holder: "other"})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Release(ctx, "q", other.ID)
			done := make(chan error, 1)
			go func() {
				_, err := fencing.AcquireSet(ctx, c, []string{"q", "p"}, coord.AcquireOptions{TTL: 30 * time.Second, Wait: coord.WaitForever},
					fencing.Opts(fencing.HoldOptions{RenewInterval: 200 * time.Millisecond}))
				done <- err
			}()
			for deadline := time.Now().Add(hang); ; time.Sleep(20 * time.Millisecond) {
				if info, err := c.Inspect(ctx, "p"); err == nil && info.Held {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("p never taken")
				}
			}
			if _, err := c.Revoke(ctx, "p"); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-done:
				var se *fencing.SetError
				if !errors.As(err, &se) || se.Lock != "q" || !errors.As(err, &le) || le.Lock != "p" {
					t.Fatalf("AcquireSet: %v, want a SetError for q caused by p's loss", err)
				}
			case <-time.After(hang):
				t.Fatal("the wait for q did not end when p was lost")
			}
		})
	}
}

// TestAcquireSetNoDeadlock: two workers take the same two locks named in
// opposite orders, over and over, waiting without limit: with nested
// single acquisitions this deadlocks at the first unlucky interleaving;
// with AcquireSet both finish, and never hold at once.
func TestAcquireSetNoDeadlock(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*hang)
			defer cancel()
			c := b.open(t)
			const rounds = 40
			var inside atomic.Int32
			var wg sync.WaitGroup
			errs := make(chan error, 2)
			for _, names := range [][]string{{"one", "two"}, {"two", "one"}} {
				wg.Go(func() {
					for range rounds {
						s, err := fencing.AcquireSet(ctx, c, names, coord.AcquireOptions{TTL: 10 * time.Second, Wait: coord.WaitForever}, fencing.Opts(fencing.HoldOptions{}))
						if err != nil {
							errs <- err
							return
						}
						if inside.Add(1) != 1 {
							errs <- errors.New("both workers held the set at once")
						}
						time.Sleep(time.Millisecond)
						inside.Add(-1)
						if err := s.Release(ctx); err != nil {
							errs <- err
							return
						}
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
		})
	}
}
