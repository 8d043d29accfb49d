package historytest

import (
	"time"

	"github.com/fence-dev/fence/pkg/history"
	hopts "github.com/fence-dev/fence/pkg/history/internal/opts"
)

// WithClock sets the wall clock of a store or Recorder, for event times and
// the age bound.
func WithClock(now func() time.Time) history.Option {
	return func(o *hopts.Options) { o.Now = now }
}

// WithMaxEvents keeps at most n events per lock (n > 0; default
// 1000).
func WithMaxEvents(n int) history.Option { return func(o *hopts.Options) { o.MaxEvents = n } }

// WithMaxAge keeps events for at most d (d > 0; default 7 days).
func WithMaxAge(d time.Duration) history.Option { return func(o *hopts.Options) { o.MaxAge = d } }
