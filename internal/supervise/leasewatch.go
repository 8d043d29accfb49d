package supervise

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/fencing"
)

// watchLease starts the coordinator's watch of the run's own leases once
// the command has started, so that it adds nothing to the start-up (what a
// notice does: see the package doc, Revocation). The first notice ends the
// HeldSet's context with lostNotice's error. At most one per run;
// r.stopWatch ends it.
func (r *Runner) watchLease(ctx context.Context) {
	if r.stopWatch != nil || r.p.Holds != nil {
		return
	}
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	var first sync.Once
	for _, h := range r.hs.helds {
		lease := h.Lease()
		ch, err := r.c.WatchLease(wctx, lease.Name, lease.ID)
		if err != nil {
			r.verbosef("cannot watch the lease on %q (renewals will tell if it ends): %v", lease.Name, err)
			continue
		}
		wg.Go(func() {
			for err := range ch {
				if err != nil && wctx.Err() == nil {
					first.Do(func() {
						r.verbosef("the coordinator reports: lock %q: %v", lease.Name, err)
						r.hs.cancel(lostNotice(h, err))
					})
				}
			}
		})
	}
	// The watch ends before the lease is released: fence's own release
	// must not read as a revocation.
	r.stopWatch = func() {
		cancel()
		wg.Wait()
	}
}

// lostNotice is the error of a lease the watch found ended (err, the
// watch's notice about h): the same as a renewal's report of a lost lease.
// When the hold knows better (fence was paused past its safe-until, which
// is why the lease expired; or a renewal found the loss first), that is
// the error.
func lostNotice(h *fencing.Held, err error) error {
	if herr := h.Check(); errors.Is(herr, coord.ErrLeaseLost) {
		return herr
	}
	lease := h.Lease()
	if errors.Is(err, coord.ErrStopRequested) {
		return &revokedError{lock: lease.Name, token: lease.Token, err: err}
	}
	return &fencing.LostError{Reason: fencing.Lost, Lock: lease.Name, Token: lease.Token,
		SafeUntil: h.Stats().SafeUntil, LastErr: err}
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
