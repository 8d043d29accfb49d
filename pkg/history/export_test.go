package history

import (
	"context"
	"time"

	hopts "github.com/fence-dev/fence/pkg/history/internal/opts"
)

// What the external tests reach of the package's internals.

const SpoolMaxEvents = spoolMaxEvents

// Pending is the pending buffer a Recorder writes through.
type Pending struct{ p *pendingEvents }

// NewPending returns a Pending that writes to h and keeps at most max events
// (the Recorder's default when max is 0).
func NewPending(h Store, max int) Pending {
	o, _ := hopts.New(WithMaxPending(max))
	return Pending{&pendingEvents{h: h, max: o.MaxPending}}
}

func (p Pending) Record(ctx context.Context, ev Event) error {
	return p.p.appendEvents(ctx, []Event{ev})
}
func (p Pending) Append(ctx context.Context, evs []Event) error { return p.p.appendEvents(ctx, evs) }
func (p Pending) Flush(ctx context.Context) error               { return p.p.appendEvents(ctx, nil) }
func (p Pending) Len() int                                      { return p.p.count() }

// PendingOf is the number of events r has not written yet.
func PendingOf(r Recorder) int { return r.(*recorder).pending.count() }

func WithMaxPending(n int) Option { return func(o *hopts.Options) { o.MaxPending = n } }

func WithClock(now func() time.Time) Option { return func(o *hopts.Options) { o.Now = now } }

func NewOptions(o ...Option) error { _, err := hopts.New(o...); return err }

func WithRecordTimeout(d time.Duration) Option {
	return func(o *hopts.Options) { o.RecordTimeout = d }
}
