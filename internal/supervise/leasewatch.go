package supervise

import (
	"context"
	"errors"
	"fmt"

	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/fencing"
)

// leaseWatch is the coordinator's notice that the lease has ended, or that
// its holder is asked to stop (Coordinator.WatchLease; etcd: a watch on the
// lease's key; local: on the lock's lock file), so that a revoke stops the
// command at once rather than at the next renewal. Without it the renewals
// find a revoked lease out, as they always do; with it they still do,
// should the watch fail.
type leaseWatch struct {
	ch     <-chan error // nil when there is no watch, or once it has spoken
	all    <-chan error // the watch's channel, drained by stop
	cancel context.CancelFunc
}

// watchLease starts the watch of the held lease, once the command has
// started: it adds nothing to the start-up. At most one per run.
func (r *runner) watchLease(ctx context.Context) {
	if r.lw.cancel != nil {
		return
	}
	if hs, ok := r.p.Holds.(*setHolds); ok {
		r.watchSet(ctx, hs) // set.go: every lease of the set
		return
	}
	if r.held == nil {
		return
	}
	w := r.c
	lease := r.held.Lease()
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	ch, err := w.WatchLease(wctx, lease.Name, lease.ID)
	if err != nil {
		cancel()
		r.verbosef("cannot watch the lease (renewals will tell if it ends): %v", err)
		return
	}
	r.lw = leaseWatch{ch: ch, all: ch, cancel: cancel}
}

// stop ends the watch and waits for it, before the lease is released: fence's
// own release must not read as a revocation.
func (w *leaseWatch) stop() {
	if w.cancel == nil {
		return
	}
	w.cancel()
	for range w.all {
	}
	w.ch = nil
}

// lostNotice is the error of a lease the watch found ended: the same as a
// renewal's report of a lost lease. When the hold knows better (fence was
// paused past its safe-until, which is why the lease expired; or a renewal
// found the loss first), that is the error.
func (r *runner) lostNotice(err error) error {
	if n, ok := err.(*setNotice); ok {
		return r.setLostNotice(n)
	}
	if herr := r.held.Check(); errors.Is(herr, coord.ErrLeaseLost) {
		return herr
	}
	if errors.Is(err, coord.ErrStopRequested) {
		lease := r.held.Lease()
		return &revokedError{lock: lease.Name, token: lease.Token, err: err}
	}
	lease := r.held.Lease()
	return &fencing.LostError{Reason: fencing.Lost, Lock: lease.Name, Token: lease.Token,
		SafeUntil: r.held.Stats().SafeUntil, LastErr: err}
}

// revokedError is why a run stopped on a stop request (`fence revoke`
// without --force): its lease was still held, and fence releases it once the
// command's tree is gone.
type revokedError struct {
	lock  string
	token uint64
	err   error // wraps coord.ErrStopRequested
}

func (e *revokedError) Error() string {
	return fmt.Sprintf("lease on %q (token %d) was revoked (fence revoke asked this run to stop and release it)", e.lock, e.token)
}

func (e *revokedError) Unwrap() error { return e.err }
