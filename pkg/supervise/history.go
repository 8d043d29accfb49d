package supervise

import (
	"context"
	"time"

	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/exitcode"
)

// record leaves what happened in the lock's history, where the coordinator
// keeps one (coord.Historian): renewal failures, a lost lease, a deadline.
// Acquisitions and releases are the coordinator's own to record. Best
// effort: the history must never change the run's outcome.
func (r *runner) record(ctx context.Context, code int, _ error) {
	h, ok := r.c.(coord.Historian)
	if !ok || r.held == nil {
		return
	}
	lease := r.held.Lease()
	ev := func(kind coord.HistoryKind) coord.HistoryEvent {
		return coord.HistoryEvent{Time: time.Now(), Lock: lease.Name, Kind: kind, Holder: lease.Holder, Token: lease.Token}
	}
	if st := r.held.Stats(); st.Failures > 0 {
		e := ev(coord.HistRenewalFailed)
		e.Count = st.Failures
		if st.LastError != nil {
			e.Error = st.LastError.Error()
		}
		_ = h.Record(ctx, e)
	}
	switch code {
	case exitcode.LeaseLost:
		if r.m.lost {
			e := ev(coord.HistLeaseLost)
			if r.lostErr != nil {
				e.Error = r.lostErr.Error()
			}
			_ = h.Record(ctx, e)
		}
	case exitcode.Deadline:
		if r.m.deadlineExceeded {
			_ = h.Record(ctx, ev(coord.HistDeadlineExceeded))
		}
	}
}
