package coordtest

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/fence-dev/fence/pkg/coord"
)

// stopper returns c twice (as the stop requester and the lease watcher),
// skipping the case when it cannot watch a lease (a kit's own partial
// coordinator: WatchLease returns errors.ErrUnsupported).
func stopper(t *testing.T, c coord.Coordinator) (coord.Coordinator, coord.Coordinator) {
	t.Helper()
	cx, cancel := context.WithCancel(ctx(t))
	defer cancel()
	ch, err := c.WatchLease(cx, "probe", "probe")
	if errors.Is(err, errors.ErrUnsupported) {
		t.Skip("the backend cannot watch a lease")
	}
	if err == nil {
		cancel()
		for range ch {
		}
	}
	return c, c
}

// watchLease starts a lease watch that ends with t.
func watchLease(t *testing.T, w coord.Coordinator, l *coord.Lease) <-chan error {
	t.Helper()
	cx, cancel := context.WithCancel(ctx(t))
	ch, err := w.WatchLease(cx, l.Name, l.ID)
	if err != nil {
		cancel()
		t.Fatalf("WatchLease(%q, %s): %v", l.Name, l.ID, err)
	}
	t.Cleanup(func() {
		cancel()
		for range ch {
		}
	})
	return ch
}

// watchSays waits for the lease watch's report, which must wrap want.
func watchSays(t *testing.T, ch <-chan error, want error, what string) {
	t.Helper()
	select {
	case err, ok := <-ch:
		if !ok || !errors.Is(err, want) {
			t.Fatalf("%s: the lease watch reported %v (open %v), want %v", what, err, ok, want)
		}
	case <-time.After(guard):
		t.Fatalf("%s: the lease watch reported nothing within %v", what, guard)
	}
}

// stopRequest: RequestStop asks a supervised holder (AcquireOptions.Process)
// through its lease watch, also one that starts after the ask; it names the
// holder's token (another token is ErrOtherToken and asks no one; the next
// holder is never asked); WaitEnded returns once the asked holder released;
// a lease without a supervisor is not asked, and RevokeToken ends only the
// holder with its token.
func (s *suite) stopRequest(t *testing.T) {
	name := s.name(t, "stop")
	c1, op, c3 := s.client(t), s.client(t), s.client(t)
	_, w := stopper(t, c1)
	opSR, _ := stopper(t, op)
	if _, _, err := opSR.RequestStop(ctx(t), name, 0); !errors.Is(err, coord.ErrNotHeld) {
		t.Errorf("RequestStop of a free lock = %v, want ErrNotHeld", err)
	}
	if _, err := opSR.RevokeToken(ctx(t), name, 1); !errors.Is(err, coord.ErrNotHeld) {
		t.Errorf("RevokeToken of a free lock = %v, want ErrNotHeld", err)
	}

	// A supervised holder.
	l := acquire(t, c1, name, coord.AcquireOptions{Holder: "supervised", Process: &coord.ProcessInfo{PIDs: []int{os.Getpid()}}})
	early := watchLease(t, w, l)
	queued := make(chan struct{})
	waiter := goAcquire(ctx(t), c3, name, coord.AcquireOptions{Holder: "waiter", Wait: coord.WaitForever,
		Process: &coord.ProcessInfo{PIDs: []int{os.Getpid()}}, OnWait: notify(queued)})
	signalled(t, queued, "waiter queued")

	info, asked, err := opSR.RequestStop(ctx(t), name, l.Token+1)
	if !errors.Is(err, coord.ErrOtherToken) || asked || info.Token != l.Token {
		t.Errorf("RequestStop with another token = token %d, asked %v, %v; want the holder's token %d, not asked, ErrOtherToken",
			info.Token, asked, err, l.Token)
	}
	if _, err := opSR.RevokeToken(ctx(t), name, l.Token+1); !errors.Is(err, coord.ErrOtherToken) {
		t.Errorf("RevokeToken with another token = %v, want ErrOtherToken", err)
	}
	wantHeldBy(t, op, l)

	ended := make(chan error, 1)
	go func() { ended <- opSR.WaitEnded(ctx(t), name, l.Token) }()
	info, asked, err = opSR.RequestStop(ctx(t), name, l.Token)
	if err != nil || !asked || info.Token != l.Token || info.LeaseID != l.ID {
		t.Fatalf("RequestStop = token %d lease %q, asked %v, %v; want token %d lease %q, asked",
			info.Token, info.LeaseID, asked, err, l.Token, l.ID)
	}
	watchSays(t, early, coord.ErrStopRequested, "watch started before the ask")
	watchSays(t, watchLease(t, w, l), coord.ErrStopRequested, "watch started after the ask")
	if _, asked, err := opSR.RequestStop(ctx(t), name, 0); err != nil || !asked {
		t.Errorf("a second RequestStop = asked %v, %v; want asked, nil", asked, err)
	}
	// An ask does not end the lease: it renews, and holds the lock.
	if _, err := c1.Renew(ctx(t), name, l.ID); err != nil {
		t.Errorf("Renew of an asked lease: %v", err)
	}
	wantHeldBy(t, op, l)
	select {
	case err := <-ended:
		t.Fatalf("WaitEnded returned %v while the lease is held", err)
	default:
	}
	release(t, c1, l)
	select {
	case err := <-ended:
		if err != nil {
			t.Errorf("WaitEnded: %v", err)
		}
	case <-time.After(guard):
		t.Fatalf("WaitEnded did not return within %v of the release", guard)
	}

	// The next holder is not asked: its watch reports only the revocation.
	r := await(t, waiter, "waiter after the release")
	if r.err != nil {
		t.Fatalf("waiter: %v", r.err)
	}
	next := watchLease(t, w, r.l)
	if _, err := opSR.RevokeToken(ctx(t), name, l.Token); !errors.Is(err, coord.ErrOtherToken) {
		t.Errorf("RevokeToken of the released token = %v, want ErrOtherToken", err)
	}
	got, err := opSR.RevokeToken(ctx(t), name, r.l.Token)
	if err != nil || got.Token != r.l.Token {
		t.Fatalf("RevokeToken = token %d, %v; want %d", got.Token, err, r.l.Token)
	}
	watchSays(t, next, coord.ErrLeaseLost, "the next holder's watch")
	if err := opSR.WaitEnded(ctx(t), name, r.l.Token); err != nil {
		t.Errorf("WaitEnded of a revoked lease: %v", err)
	}
	_ = c3.Release(ctx(t), name, r.l.ID)

	// A lease without a supervisor is not asked.
	a := acquire(t, c1, name, coord.AcquireOptions{Holder: "unsupervised"})
	if info, asked, err := opSR.RequestStop(ctx(t), name, a.Token); err != nil || asked || info.Token != a.Token {
		t.Errorf("RequestStop of an unsupervised lease = token %d, asked %v, %v; want token %d, not asked",
			info.Token, asked, err, a.Token)
	}
	if got, err := opSR.RevokeToken(ctx(t), name, 0); err != nil || got.Token != a.Token {
		t.Errorf("RevokeToken(0) = token %d, %v; want %d", got.Token, err, a.Token)
	}
	if info := inspect(t, op, name); info.Held {
		t.Errorf("held by %q after RevokeToken of an unsupervised lease", info.Holder)
	}
}
