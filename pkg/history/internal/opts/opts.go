// Package opts holds the options shared by package history and its stores:
// the bounds of a kept history, the clock and the Recorder's settings.
package opts

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/fence-dev/fence/pkg/coord"
)

// MaxEvents is the number of events kept per lock by default.
const MaxEvents = 1000

// MaxAge is how long an event is kept by default.
const MaxAge = 7 * 24 * time.Hour

// MaxTextLen bounds the free-text fields of an event (see
// history.Normalize).
const MaxTextLen = 1024

// Options configure stores and the Recorder. Each reads the fields it
// needs; the zero value of a field means its default.
type Options struct {
	// MaxEvents bounds the events kept per lock (MaxEvents).
	MaxEvents int
	// MaxAge bounds how long an event is kept (MaxAge).
	MaxAge time.Duration
	// Now is the wall clock, for event times and the age bound (time.Now).
	// Tests inject their own.
	Now func() time.Time
	// Logger receives the Recorder's warnings about events it could not
	// write (slog.Default()).
	Logger *slog.Logger
	// RecordTimeout bounds each write the Recorder makes on its own behalf
	// (3s), so that an unreachable store cannot hold up a lease operation
	// for long.
	RecordTimeout time.Duration
	// MaxPending bounds the events a Recorder keeps in memory while the
	// store cannot be written (256); beyond it the oldest are dropped.
	MaxPending int
	// SpoolDir, when set, is where a Recorder keeps the events it could not
	// write by its close (history.WithSpool).
	SpoolDir string
}

// Option sets a field of Options. Those of the tests (the bounds, the
// clock) are in package historytest and history's export_test.go.
type Option func(*Options)

// OfLease tells whether kind (a history.Kind) begins or ends a lease:
// acquired, released, revoked, expired (the events by which a Recorder
// tells whether a lease ended on record).
func OfLease(kind string) bool {
	switch kind {
	case "acquired", "released", "revoked", "expired":
		return true
	}
	return false
}

// LastLease returns the newest of evs (oldest first) whose kind, as kind
// reads it, is a lease event's (OfLease): the scan of a lock's latest
// events for the end of its last lease, shared by the Recorder and the
// stores.
func LastLease[E any](evs []E, kind func(E) string) (E, bool) {
	for i := len(evs) - 1; i >= 0; i-- {
		if OfLease(kind(evs[i])) {
			return evs[i], true
		}
	}
	var none E
	return none, false
}

// New applies opts over the defaults. It fails, wrapping coord.ErrInvalid,
// on a negative bound.
func New(opts ...Option) (Options, error) {
	o, errs := Lenient(opts)
	if len(errs) > 0 {
		return o, errs[0]
	}
	return o, nil
}

// Lenient applies opts over the defaults. A negative bound is replaced by
// its default, and reported in errs (each wrapping coord.ErrInvalid); the
// other options are kept.
func Lenient(opts []Option) (o Options, errs []error) {
	for _, f := range opts {
		f(&o)
	}
	orDefault(&errs, "max events", &o.MaxEvents, MaxEvents)
	orDefault(&errs, "max age", &o.MaxAge, MaxAge)
	orDefault(&errs, "record timeout", &o.RecordTimeout, 3*time.Second)
	orDefault(&errs, "max pending", &o.MaxPending, 256)
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o, errs
}

// orDefault sets *v to def when it is 0 or negative, and reports a
// negative one in errs.
func orDefault[T int | time.Duration](errs *[]error, name string, v *T, def T) {
	if *v < 0 {
		*errs = append(*errs, fmt.Errorf("%w: history: %s %v is negative", coord.ErrInvalid, name, *v))
	}
	if *v <= 0 {
		*v = def
	}
}

// Window is how many of a lock's newest events a read of at most limit
// (0: no limit) keeps by the count bound.
func (o Options) Window(limit int) int {
	if limit > 0 && limit < o.MaxEvents {
		return limit
	}
	return o.MaxEvents
}

// Cutoff is the oldest event time kept as of now.
func (o Options) Cutoff() time.Time { return o.Now().Add(-o.MaxAge) }
