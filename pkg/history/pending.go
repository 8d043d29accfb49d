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
// back. It is safe for concurrent use; writes are serialized, and pending
// events are written with the new ones in one Append.
type pendingEvents struct {
	h   Store
	max int

	mu  sync.Mutex
	evs []Event
}

// appendEvents writes the pending events, then evs. When that fails, evs
// are kept with them and the error is returned. An invalid event (see
// Normalize) is refused at once with an error wrapping coord.ErrInvalid.
func (p *pendingEvents) appendEvents(ctx context.Context, evs []Event) error {
	for _, ev := range evs {
		if _, err := Normalize(ev, time.Time{}); err != nil {
			return err
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.evs = append(p.evs, evs...)
	err := p.flushLocked(ctx)
	p.trimLocked()
	return err
}

// Flush writes the pending events, if any.
func (p *pendingEvents) flush(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.flushLocked(ctx)
}

// count is the number of events waiting to be written.
func (p *pendingEvents) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.evs)
}

func (p *pendingEvents) flushLocked(ctx context.Context) error {
	if len(p.evs) == 0 {
		return nil
	}
	err := p.h.Append(ctx, p.evs)
	if err == nil {
		p.evs = p.evs[:0]
		return nil
	}
	if !errors.Is(err, coord.ErrInvalid) {
		return err
	}
	// One event is invalid: fall back to one at a time to find it.
	for len(p.evs) > 0 {
		err := p.h.Record(ctx, p.evs[0])
		if err != nil && !errors.Is(err, coord.ErrInvalid) {
			return err
		}
		// Written, or refused for good: either way it leaves the queue.
		p.evs = p.evs[1:]
		if err != nil && len(p.evs) == 0 {
			return err
		}
	}
	p.evs = nil
	return nil
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

func (p *pendingEvents) trimLocked() {
	if n := len(p.evs) - p.max; n > 0 {
		p.evs = append(p.evs[:0:0], p.evs[n:]...)
	}
}
