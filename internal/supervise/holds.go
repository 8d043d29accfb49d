package supervise

import (
	"context"
	"errors"
	"maps"

	"github.com/fence-dev/fence/pkg/clock"
	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/fencing"
)

// HeldSet is the leases the command runs under, one or several: the
// Runner's own (one lock, or the set of Options.Locks) or the caller's
// (Options.Holds: `fence shards run`, one lease per shard). The command is
// stopped before the earliest of them can expire: the watchdog's stop time
// is the earliest safe-until less the grace, and the loss of any lease
// stops the command (exit 76). Call Renewed from the holds'
// fencing.OnRenewal (with any hold): the Runner then tells the watchdog of
// the later earliest safe-until.
type HeldSet struct {
	helds   []*fencing.Held
	env     map[string]string
	ctx     context.Context
	cancel  context.CancelCauseFunc
	renewed chan struct{} // wakes the Runner's loop
}

// NewHeldSet makes a HeldSet of helds, whose command gets env, set last in
// its environment (FENCE_LOCK, FENCE_TOKEN and the like are removed).
func NewHeldSet(helds []*fencing.Held, env map[string]string) *HeldSet {
	s := &HeldSet{helds: helds, env: env, renewed: make(chan struct{}, 1)}
	s.ctx, s.cancel = context.WithCancelCause(context.Background())
	for _, h := range helds {
		context.AfterFunc(h.Context(), func() {
			if c := context.Cause(h.Context()); errors.Is(c, coord.ErrLeaseLost) {
				s.cancel(c)
			}
		})
	}
	return s
}

// Close ends the set's context (not the holds).
func (s *HeldSet) Close() { s.cancel(context.Canceled) }

// Context ends when any of the leases can no longer be trusted, with its
// *fencing.LostError as the cause, or (a run's own leases) when the
// coordinator's watch reports one ended or revoked (lostNotice).
func (s *HeldSet) Context() context.Context { return s.ctx }

// SafeUntil is the earliest safe-until of the leases, on the boot clock.
func (s *HeldSet) SafeUntil() clock.Boot { return bootSafeUntil(s.earliest()) }

// earliest is the hold whose safe-until comes first: its safe-until is the
// set's, until which every lease is certainly held.
func (s *HeldSet) earliest() *fencing.Held {
	var e *fencing.Held
	for _, h := range s.helds {
		if e == nil || bootSafeUntil(h) < bootSafeUntil(e) {
			e = h
		}
	}
	return e
}

// Check is fencing.Held.Check of every lease: the first error.
func (s *HeldSet) Check() error {
	for _, h := range s.helds {
		if err := h.Check(); err != nil {
			return err
		}
	}
	return nil
}

// Leases are the held leases (the local backend records the command's
// process group with each).
func (s *HeldSet) Leases() []coord.Lease {
	out := make([]coord.Lease, len(s.helds))
	for i, h := range s.helds {
		out[i] = h.Lease()
	}
	return out
}

// Renewed is told that one of the holds was renewed. It does not block.
func (s *HeldSet) Renewed() { poke(s.renewed) }

// poke wakes the reader of ch (of capacity 1) without blocking.
func poke(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// held is the hold of lock name (nil if not in the set).
func (s *HeldSet) held(name string) *fencing.Held {
	for _, h := range s.helds {
		if h.Lease().Name == name {
			return h
		}
	}
	return nil
}

// bootSafeUntil is h's safe-until on the boot clock, which the watchdog
// reads (0 for no hold).
func bootSafeUntil(h *fencing.Held) clock.Boot {
	if h == nil {
		return 0
	}
	return h.Stats().SafeUntilBoot
}

// holdOptions are the options of the run's own holds: the renew interval,
// margin and --no-renew of the plan; every acknowledgment wakes the loop,
// which moves the watchdog's stop time.
func (r *Runner) holdOptions() []fencing.Option {
	p := r.p
	o := []fencing.Option{fencing.WithRenewInterval(p.interval), fencing.WithMargin(p.margin),
		fencing.OnRenewal(func(h *fencing.Held, err error) {
			if err != nil {
				r.verbosef("renewal %d failed: %v", h.Stats().Consecutive, err)
				return
			}
			poke(r.renewed)
			r.failuresBack(h) // an acknowledgment: the coordinator is reachable
		})}
	if p.NoRenew {
		o = append(o, fencing.WithoutRenewal())
	}
	return o
}

// commandEnv is the FENCE_ variables of the command: its leases' and the
// deadline's.
func (r *Runner) commandEnv(deadline clock.Boot) map[string]string {
	m := maps.Clone(r.hs.env)
	if m == nil {
		m = map[string]string{}
	}
	if deadline != 0 {
		m["FENCE_DEADLINE"] = deadlineVar(deadline)
	}
	return m
}
