package history

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/fence-dev/fence/pkg/coord"
)

// pendingEvents writes events to a history and keeps, in memory, those it could
// not write (the coordinator was unreachable), to write them before the next
// event once a write succeeds again. The order of events is kept: an event
// is never written before an older one that is still pending. Beyond max
// pending events, the oldest are dropped.
//
// fence run records renewal failures through a Recorder, so that the ones
// seen while the coordinator could not be reached are written when it comes
// back. It is safe for concurrent use; writes are serialized.
type pendingEvents struct {
	h   Store
	max int

	mu  sync.Mutex
	evs []Event
}

// appendEvents writes the pending events, then evs (none: a flush). When
// that fails, evs are kept with them and the error is returned. An invalid
// event (see Normalize) is refused at once with an error wrapping
// coord.ErrInvalid.
func (p *pendingEvents) appendEvents(ctx context.Context, evs []Event) error {
	for _, ev := range evs {
		if _, err := Normalize(ev, time.Time{}); err != nil {
			return err
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	var err error
	p.evs, err = appendValid(ctx, p.h, append(p.evs, evs...))
	if n := len(p.evs) - p.max; n > 0 {
		p.evs = append(p.evs[:0:0], p.evs[n:]...)
	}
	return err
}

// count is the number of events waiting to be written.
func (p *pendingEvents) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.evs)
}

// appendValid appends evs to st, the one write of the Recorder's pending
// events and of a spool's flush, and returns those it did not write. On an
// error wrapping coord.ErrInvalid (an event the store refuses for good) it
// writes them one at a time to find it: a refused event leaves the queue
// (its error is returned when it was the last), the others are written.
// On any other error the events from the first unwritten are left.
func appendValid(ctx context.Context, st Store, evs []Event) ([]Event, error) {
	if len(evs) == 0 {
		return evs, nil
	}
	err := st.Append(ctx, evs)
	if err == nil {
		return evs[:0], nil
	}
	if !errors.Is(err, coord.ErrInvalid) {
		return evs, err
	}
	for len(evs) > 0 {
		err := st.Record(ctx, evs[0])
		if err != nil && !errors.Is(err, coord.ErrInvalid) {
			return evs, err
		}
		// Written, or refused for good: either way it leaves the queue.
		evs = evs[1:]
		if err != nil && len(evs) == 0 {
			return nil, err
		}
	}
	return nil, nil
}

// take removes the pending events and returns them.
func (p *pendingEvents) take() []Event {
	p.mu.Lock()
	defer p.mu.Unlock()
	evs := p.evs
	p.evs = nil
	return evs
}

// whenEmpty runs fn, with writes held back, when no event is pending.
func (p *pendingEvents) whenEmpty(fn func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.evs) == 0 {
		fn()
	}
}
