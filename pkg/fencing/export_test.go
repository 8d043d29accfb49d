package fencing

import (
	"context"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/fence-dev/fence/pkg/clock"
	"github.com/fence-dev/fence/pkg/coord"
)

// HoldOn is Hold with fc in place of the boot clock and the timers, for
// tests only: a boot reading is fc's time in Unix nanoseconds, and
// Lease.Sent is read the same way. The holds on one fake clock share a
// scheduler.
func HoldOn(ctx context.Context, c coord.Coordinator, lease *coord.Lease, opts HoldOptions, fc *clockwork.FakeClock) (*Held, error) {
	return holdOn(ctx, c, lease, opts, fakeClk{fc})
}

// HoldOptions is the configuration the Options build, for tests that set
// it whole (and RetryInterval, which no Option sets).
type HoldOptions = holdConfig

// Opts sets the whole configuration.
func Opts(o HoldOptions) Option { return func(c *holdConfig) { *c = o } }

// Earliest is the hold of s whose safe-until comes first.
func (s *Set) Earliest() *Held {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.earliestLocked()
}

// fakeClk is a test's clockwork.FakeClock: a boot reading is the fake time
// in Unix nanoseconds, and Lease.Sent is read the same way.
type fakeClk struct{ c *clockwork.FakeClock }

func (f fakeClk) now() clock.Boot                          { return clock.Boot(f.c.Now().UnixNano()) }
func (f fakeClk) toBoot(t time.Time) clock.Boot            { return clock.Boot(t.UnixNano()) }
func (f fakeClk) toTime(t clock.Boot) time.Time            { return time.Unix(0, int64(t)) }
func (f fakeClk) newTimer(d time.Duration) clockwork.Timer { return f.c.NewTimer(d) }
