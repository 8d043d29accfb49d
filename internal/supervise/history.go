package supervise

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/fence-dev/fence/internal/exitcode"
	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/fencing"
	"github.com/fence-dev/fence/pkg/history"
)

// record leaves what happened in the history of the run's own locks, where
// the coordinator keeps one (history.Store): renewal failures of each
// lease, the lost lease, the deadline on every lease. Acquisitions and
// releases are the coordinator's own to record. Best effort: the history
// must never change the run's outcome.
func (r *Runner) record(ctx context.Context, code int) {
	h, ok := r.c.(history.Store)
	if !ok {
		return
	}
	ev := func(l coord.Lease, kind history.Kind) history.Event {
		return history.Event{Time: time.Now(), Lock: l.Name, Kind: kind, Holder: l.Holder, Token: l.Token}
	}
	// The failures recorded during the run, first (each write is bounded by
	// the renewal interval; ctx may end sooner).
	wrote := make(chan struct{})
	go func() { r.hist.wg.Wait(); close(wrote) }()
	select {
	case <-wrote:
	case <-ctx.Done():
		return
	}
	for _, held := range r.hs.helds {
		r.recordFailures(ctx, h, held)
	}
	switch {
	case code == exitcode.LeaseLost && r.m.lost:
		if held := r.hs.held(r.lostLock()); held != nil {
			e := ev(held.Lease(), history.LeaseLost)
			if r.end.lostErr != nil {
				e.Error = r.end.lostErr.Error()
			}
			_ = h.Record(ctx, e)
		}
	case code == exitcode.Deadline && r.m.deadlineExceeded:
		for _, held := range r.hs.helds {
			_ = h.Record(ctx, ev(held.Lease(), history.DeadlineExceeded))
		}
	}
}

// lostLock is the lock whose loss stopped the command: the one a loss or
// revocation names, else the one that would expire first.
func (r *Runner) lostLock() string {
	var le *fencing.LostError
	var re *revokedError
	switch {
	case errors.As(r.end.lostErr, &le):
		return le.Lock
	case errors.As(r.end.lostErr, &re):
		return re.lock
	}
	return r.hs.earliest().Lease().Name
}

// failureRecorder keeps count of the renewal failures of each lease
// already written to the history, so that each is written once: at the
// first acknowledged renewal after them (the coordinator can be reached
// again, so an operator sees them during the run), and what is left at the
// end of the run.
type failureRecorder struct {
	mu       sync.Mutex
	recorded map[*fencing.Held]int // failures written (or being written) so far
	wg       sync.WaitGroup
}

// failuresBack is called on the renewal goroutine after an acknowledged
// renewal of held. It must not block: the write runs on a goroutine of its
// own.
func (r *Runner) failuresBack(held *fencing.Held) {
	h, ok := r.c.(history.Store)
	if !ok {
		return
	}
	r.hist.mu.Lock()
	pending := held.Stats().Failures > r.hist.recorded[held]
	if pending {
		r.hist.wg.Add(1)
	}
	r.hist.mu.Unlock()
	if !pending {
		return
	}
	go func() {
		defer r.hist.wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), r.p.interval)
		defer cancel()
		r.recordFailures(ctx, h, held)
	}()
}

// recordFailures writes one renewal_failed event for the failures of held
// not yet written (their count and the last error).
func (r *Runner) recordFailures(ctx context.Context, h history.Store, held *fencing.Held) {
	st := held.Stats()
	r.hist.mu.Lock()
	n := st.Failures - r.hist.recorded[held]
	if n > 0 {
		if r.hist.recorded == nil {
			r.hist.recorded = map[*fencing.Held]int{}
		}
		r.hist.recorded[held] = st.Failures
	}
	r.hist.mu.Unlock()
	if n <= 0 {
		return
	}
	lease := held.Lease()
	e := history.Event{Time: time.Now(), Lock: lease.Name, Kind: history.RenewalFailed,
		Holder: lease.Holder, Token: lease.Token, Count: n}
	if st.LastError != nil {
		e.Error = st.LastError.Error()
	}
	_ = h.Record(ctx, e)
}
