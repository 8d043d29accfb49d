package supervise

import (
	"context"
	"sync"
	"time"

	"github.com/fence-dev/fence/pkg/history"

	"github.com/fence-dev/fence/internal/exitcode"
	"github.com/fence-dev/fence/pkg/fencing"
)

// record leaves what happened in the lock's history, where the coordinator
// keeps one (history.Store): renewal failures, a lost lease, a deadline.
// Acquisitions and releases are the coordinator's own to record. Best
// effort: the history must never change the run's outcome.
func (r *runner) record(ctx context.Context, code int, _ error) {
	h, ok := r.c.(history.Store)
	if !ok || r.held == nil {
		return
	}
	lease := r.held.Lease()
	ev := func(kind history.Kind) history.Event {
		return history.Event{Time: time.Now(), Lock: lease.Name, Kind: kind, Holder: lease.Holder, Token: lease.Token}
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
	r.recordFailures(ctx, h, r.held)
	switch code {
	case exitcode.LeaseLost:
		if r.m.lost {
			e := ev(history.LeaseLost)
			if r.lostErr != nil {
				e.Error = r.lostErr.Error()
			}
			_ = h.Record(ctx, e)
		}
	case exitcode.Deadline:
		if r.m.deadlineExceeded {
			_ = h.Record(ctx, ev(history.DeadlineExceeded))
		}
	}
}

// failureRecorder keeps count of the renewal failures already written to
// the history, so that each is written once: at the first acknowledged
// renewal after them (the coordinator can be reached again, so an operator
// sees them during the run), and what is left at the end of the run.
type failureRecorder struct {
	mu       sync.Mutex
	recorded int // failures written (or being written) so far
	wg       sync.WaitGroup
}

// failuresBack is called on the renewal goroutine after an acknowledged
// renewal. It must not block: the write runs on a goroutine of its own.
func (r *runner) failuresBack() {
	h, ok := r.c.(history.Store)
	held := r.heldPtr.Load()
	if !ok || held == nil {
		return
	}
	r.hist.mu.Lock()
	pending := held.Stats().Failures > r.hist.recorded
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

// recordFailures writes one renewal_failed event for the failures not yet
// written (their count and the last error).
func (r *runner) recordFailures(ctx context.Context, h history.Store, held *fencing.Held) {
	st := held.Stats()
	r.hist.mu.Lock()
	n := st.Failures - r.hist.recorded
	if n > 0 {
		r.hist.recorded = st.Failures
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
