package supervise

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fence-dev/fence/internal/exitcode"
	"github.com/fence-dev/fence/pkg/clock"
	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/fencing"
	"github.com/fence-dev/fence/pkg/history"
)

// `fence run A B C -- COMMAND`: Options.Locks. The locks are taken with
// fencing.AcquireSet (byte order of their names, all or none within one
// --wait budget), then the command runs under Options.Holds of the set
// (stopped before the earliest lease can expire, and when any is lost or
// revoked), and the set is released in reverse order.

// checkLocks validates Options.Locks.
func checkLocks(p *plan) error {
	if p.Holds != nil {
		return fmt.Errorf("%w: Locks and Holds do not go together", coord.ErrInvalid)
	}
	seen := make(map[string]bool, len(p.Locks))
	for _, n := range p.Locks {
		if err := coord.ValidateName(n); err != nil {
			return err
		}
		if seen[n] {
			return fmt.Errorf("%w: lock %q is given twice", coord.ErrInvalid, n)
		}
		seen[n] = true
	}
	p.Lock = cmp.Or(p.Lock, strings.Join(p.Locks, ","))
	return nil
}

// setHolds is the Holds of the set the run took itself.
type setHolds struct {
	set *fencing.Set
	env map[string]string

	mu sync.Mutex
	f  func(clock.Boot)
}

func (s *setHolds) Context() context.Context { return s.set.Context() }
func (s *setHolds) SafeUntil() clock.Boot    { return bootSafeUntil(earliestHeld(s.set)) }
func (s *setHolds) Check() error             { return s.set.Check() }
func (s *setHolds) Leases() []coord.Lease    { return SetLeases(s.set) }
func (s *setHolds) Env() map[string]string   { return s.env }

func (s *setHolds) OnSafeUntil(f func(clock.Boot)) {
	s.mu.Lock()
	s.f = f
	s.mu.Unlock()
}

// renewed is the set's OnSafeUntil: its earliest safe-until moved later.
func (s *setHolds) renewed(h *fencing.Held) {
	su := bootSafeUntil(h)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.f != nil {
		s.f(su)
	}
}

// earliest is the lease that would expire first.
func (s *setHolds) earliest() coord.Lease { return earliestHeld(s.set).Lease() }

// earliestHeld is the hold of set whose safe-until comes first: its
// safe-until is the set's, until which every lease is certainly held.
func earliestHeld(set *fencing.Set) *fencing.Held {
	var e *fencing.Held
	for _, h := range set.Helds() {
		if h != nil && (e == nil || bootSafeUntil(h) < bootSafeUntil(e)) {
			e = h
		}
	}
	return e
}

// SetLeases are the leases of set, in the order the names were given.
func SetLeases(set *fencing.Set) []coord.Lease {
	var out []coord.Lease
	for _, h := range set.Helds() {
		out = append(out, h.Lease())
	}
	return out
}

// setHeld is the hold of lock name in set (nil if not in it).
func setHeld(set *fencing.Set, name string) *fencing.Held {
	for _, h := range set.Helds() {
		if h.Lease().Name == name {
			return h
		}
	}
	return nil
}

// SetEnv is what the command of `fence run A B C` learns of its leases:
// FENCE_LOCKS (how many), FENCE_LOCK_i, FENCE_TOKEN_i and FENCE_LEASE_ID_i
// for i = 1..N in the order given, FENCE_HOLDER and FENCE_TTL. FENCE_LOCK,
// FENCE_TOKEN and FENCE_LEASE_ID are not set (they are removed).
func SetEnv(leases []coord.Lease) map[string]string {
	m := map[string]string{"FENCE_LOCKS": strconv.Itoa(len(leases))}
	for i, l := range leases {
		n := strconv.Itoa(i + 1)
		m["FENCE_LOCK_"+n] = l.Name
		m["FENCE_TOKEN_"+n] = strconv.FormatUint(l.Token, 10)
		m["FENCE_LEASE_ID_"+n] = l.ID
	}
	if len(leases) > 0 {
		m["FENCE_HOLDER"] = leases[0].Holder
		m["FENCE_TTL"] = strconv.FormatFloat(leases[0].TTL.Seconds(), 'f', -1, 64)
	}
	return m
}

// isSetVar reports whether k is one of the variables SetEnv sets for a set
// (FENCE_LOCKS, FENCE_LOCK_3, ...): inherited ones are removed.
func isSetVar(k string) bool {
	if k == "FENCE_LOCKS" {
		return true
	}
	for _, p := range []string{"FENCE_LOCK_", "FENCE_TOKEN_", "FENCE_LEASE_ID_"} {
		if rest, ok := strings.CutPrefix(k, p); ok && rest != "" && strings.Trim(rest, "0123456789") == "" {
			return true
		}
	}
	return false
}

// runSet is run for Options.Locks: take the set, supervise the command
// under it, release it.
func (r *runner) runSet(ctx context.Context, path string, args, env []string, ignored []int, sigs <-chan os.Signal) (int, error) {
	p := r.p
	holder := cmp.Or(p.Holder, coord.DefaultHolder())
	hs := &setHolds{}
	hopts := holdOptions(p, hs.renewed, func(err error, n int) {
		r.verbosef("renewal %d failed: %v", n, err)
	})
	acq := coord.AcquireOptions{
		TTL:    p.TTL,
		Holder: holder,
		Wait:   p.Wait,
		// The watchdog was started by Start, as for one lock: its PID is
		// recorded with every lease.
		Process: &coord.ProcessInfo{PIDs: []int{os.Getpid(), r.wd.Process.Pid}},
		OnWait: func(cur coord.LockInfo) {
			if p.Verbose || isTerminal(r.stderr) {
				r.infof("waiting for %q, held by %s (token %d)", cur.Name, cur.Holder, cur.Token)
			}
		},
	}
	// The holds outlive ctx (the command is stopped first, the set released
	// after); a signal or the end of ctx ends only the wait.
	actx, cancelAcq := context.WithCancelCause(context.WithoutCancel(ctx))
	defer cancelAcq(nil)
	acqDone := make(chan struct{})
	go func() {
		select {
		case s := <-sigs:
			cancelAcq(interrupted{s.(syscall.Signal)})
		case <-ctx.Done():
			cancelAcq(context.Cause(ctx))
		case <-acqDone:
		}
	}()
	t0 := clock.Now()
	set, err := fencing.AcquireSet(actx, r.c, p.Locks, acq, hopts...)
	close(acqDone)
	r.m.wait = clock.Now().Sub(t0)
	if err == nil && context.Cause(actx) != nil {
		// A signal came as the last lock was granted: do not start the command.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		_ = set.Release(rctx)
		cancel()
		err = &fencing.SetError{Lock: p.Locks[len(p.Locks)-1], Err: context.Cause(actx)}
	}
	if err != nil {
		lock := p.Lock
		var se *fencing.SetError
		if errors.As(err, &se) {
			lock = se.Lock
		}
		var intr interrupted
		switch cause := context.Cause(actx); {
		case errors.As(cause, &intr):
			return 128 + int(intr.sig), fmt.Errorf("interrupted by SIG%s while waiting for %q", SignalName(intr.sig), lock)
		case errors.Is(err, coord.ErrBusy):
			return p.ConflictExitCode, err
		case ctx.Err() != nil:
			return exitcode.Failure, fmt.Errorf("waiting for %q: %w", lock, context.Cause(ctx))
		case errors.Is(err, coord.ErrLeaseLost):
			return exitcode.LeaseLost, err
		default:
			return exitcode.Failure, err
		}
	}
	leases := SetLeases(set)
	hs.set, hs.env = set, SetEnv(leases)
	p.Holds = hs
	r.m.token = leases[0].Token
	for _, l := range leases {
		r.verbosef("acquired %q: token %d, lease %s, TTL %v", l.Name, l.Token, l.ID, l.TTL)
	}
	r.verbosef("waited %v for %d locks", r.m.wait.Round(time.Millisecond), len(leases))
	r.useHolds()

	code, runErr := r.supervise(ctx, path, args, env, ignored, sigs)
	r.attaching.Wait()

	rctx, cancel := r.afterRun(ctx, code)
	defer cancel()
	for _, h := range set.Helds() {
		st := h.Stats()
		r.m.renewals += st.Renewals
		r.m.failures += st.Failures
	}
	r.recordSet(rctx, set, code)
	if err := set.Release(rctx); err != nil {
		r.warnf("%v", err)
	} else {
		r.verbosef("released %s (in reverse order)", p.Lock)
	}
	return code, runErr
}

// unrenewed names the lease that was not renewed in time when the stop
// came with no loss reported: for a set, the one that would expire first.
func (r *runner) unrenewed() (string, uint64) {
	if hs, ok := r.p.Holds.(*setHolds); ok {
		l := hs.earliest()
		return l.Name, l.Token
	}
	return r.p.Lock, r.m.token
}

// lostLock is the lock whose loss stopped the command.
func (r *runner) lostLock() string {
	var le *fencing.LostError
	var re *revokedError
	switch {
	case errors.As(r.lostErr, &le):
		return le.Lock
	case errors.As(r.lostErr, &re):
		return re.lock
	}
	lock, _ := r.unrenewed()
	return lock
}

// recordSet is record for a set: renewal failures of each lease, the lost
// lease, the deadline on every lease.
func (r *runner) recordSet(ctx context.Context, set *fencing.Set, code int) {
	h, ok := r.c.(history.Store)
	if !ok {
		return
	}
	ev := func(l coord.Lease, kind history.Kind) history.Event {
		return history.Event{Time: time.Now(), Lock: l.Name, Kind: kind, Holder: l.Holder, Token: l.Token}
	}
	for _, held := range set.Helds() {
		if st := held.Stats(); st.Failures > 0 {
			e := ev(held.Lease(), history.RenewalFailed)
			e.Count = st.Failures
			if st.LastError != nil {
				e.Error = st.LastError.Error()
			}
			_ = h.Record(ctx, e)
		}
	}
	switch {
	case code == exitcode.LeaseLost && r.m.lost:
		if held := setHeld(set, r.lostLock()); held != nil {
			e := ev(held.Lease(), history.LeaseLost)
			if r.lostErr != nil {
				e.Error = r.lostErr.Error()
			}
			_ = h.Record(ctx, e)
		}
	case code == exitcode.Deadline && r.m.deadlineExceeded:
		for _, held := range set.Helds() {
			_ = h.Record(ctx, ev(held.Lease(), history.DeadlineExceeded))
		}
	}
}

// setNotice is the lease watch's notice about one lease of a set.
type setNotice struct {
	held *fencing.Held
	err  error
}

func (n *setNotice) Error() string {
	return fmt.Sprintf("lock %q: %v", n.held.Lease().Name, n.err)
}

func (n *setNotice) Unwrap() error { return n.err }

// watchSet watches every lease of the set (Coordinator.WatchLease) and passes
// on the first notice of each, naming its hold.
func (r *runner) watchSet(ctx context.Context, hs *setHolds) {
	w := r.c
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	helds := hs.set.Helds()
	out := make(chan error, len(helds))
	var wg sync.WaitGroup
	for _, h := range helds {
		lease := h.Lease()
		ch, err := w.WatchLease(wctx, lease.Name, lease.ID)
		if err != nil {
			r.verbosef("cannot watch the lease on %q (renewals will tell if it ends): %v", lease.Name, err)
			continue
		}
		wg.Go(func() {
			for err := range ch {
				if err == nil {
					continue
				}
				select {
				case out <- &setNotice{held: h, err: err}:
				case <-wctx.Done():
				}
			}
		})
	}
	go func() {
		wg.Wait()
		close(out)
	}()
	r.lw = leaseWatch{ch: out, all: out, cancel: cancel}
}

// setLostNotice is lostNotice for one lease of a set.
func (r *runner) setLostNotice(n *setNotice) error {
	h := n.held
	if herr := h.Check(); errors.Is(herr, coord.ErrLeaseLost) {
		return herr
	}
	lease := h.Lease()
	if errors.Is(n.err, coord.ErrStopRequested) {
		return &revokedError{lock: lease.Name, token: lease.Token, err: n.err}
	}
	return &fencing.LostError{Reason: fencing.Lost, Lock: lease.Name, Token: lease.Token,
		SafeUntil: h.Stats().SafeUntil, LastErr: n.err}
}
