package supervise

import (
	"context"
	"errors"
	"fmt"
	"sync"

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

// watchLease starts the watch of the run's own leases, once the command
// has started: it adds nothing to the start-up. At most one per run. The
// first notice of each lease is passed on, naming its hold.
func (r *Runner) watchLease(ctx context.Context) {
	if r.lw.cancel != nil || r.p.Holds != nil {
		return
	}
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	out := make(chan error, len(r.hs.helds))
	var wg sync.WaitGroup
	for _, h := range r.hs.helds {
		lease := h.Lease()
		ch, err := r.c.WatchLease(wctx, lease.Name, lease.ID)
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
				case out <- &leaseNotice{held: h, err: err}:
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

// leaseNotice is the watch's notice about one lease.
type leaseNotice struct {
	held *fencing.Held
	err  error
}

func (n *leaseNotice) Error() string {
	return fmt.Sprintf("lock %q: %v", n.held.Lease().Name, n.err)
}

func (n *leaseNotice) Unwrap() error { return n.err }

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
func lostNotice(n *leaseNotice) error {
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
