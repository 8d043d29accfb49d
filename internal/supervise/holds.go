package supervise

import (
	"context"
	"errors"
	"sync"

	"github.com/fence-dev/fence/internal/clock"
	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/fencing"
)

// Holds is what the command's safety rests on when the caller holds the
// leases itself (Options.Holds: `fence shards run`, one lease per shard):
// the Runner then acquires and releases nothing, and stops the command
// before the earliest of the leases can expire, exactly as it does for its
// own lease: the watchdog's stop time is the earliest safe-until less the
// grace, and the loss of any lease stops the command (exit 76).
type Holds interface {
	// Context ends when any of the leases can no longer be trusted, with
	// its *fencing.LostError as the cause.
	Context() context.Context
	// SafeUntil is the earliest safe-until of the leases.
	SafeUntil() clock.Boot
	// Check is fencing.Held.Check of every lease: the first error.
	Check() error
	// Leases are the held leases (the local backend records the command's
	// process group with each).
	Leases() []coord.Lease
	// Env is what the command is told of them, set last in its
	// environment (FENCE_LOCK, FENCE_TOKEN and the like are removed).
	Env() map[string]string
	// OnSafeUntil sets the function called with each later earliest
	// safe-until. It must not block.
	OnSafeUntil(func(clock.Boot))
}

// HeldSet is a Holds of several fencing holds. Call Renewed from their
// HoldOptions.OnSafeUntil (with any safe-until): it recomputes the earliest.
type HeldSet struct {
	helds  []*fencing.Held
	env    map[string]string
	ctx    context.Context
	cancel context.CancelCauseFunc

	mu   sync.Mutex
	last clock.Boot
	f    func(clock.Boot)
}

// NewHeldSet makes a Holds of helds, whose command gets env.
func NewHeldSet(helds []*fencing.Held, env map[string]string) *HeldSet {
	s := &HeldSet{helds: helds, env: env}
	s.ctx, s.cancel = context.WithCancelCause(context.Background())
	for _, h := range helds {
		context.AfterFunc(h.Context(), func() {
			if c := context.Cause(h.Context()); errors.Is(c, coord.ErrLeaseLost) {
				s.cancel(c)
			}
		})
	}
	s.last = s.SafeUntil()
	return s
}

// Close ends the set's context (not the holds).
func (s *HeldSet) Close() { s.cancel(context.Canceled) }

func (s *HeldSet) Context() context.Context { return s.ctx }

func (s *HeldSet) SafeUntil() clock.Boot {
	var su clock.Boot
	for i, h := range s.helds {
		if v := bootSafeUntil(h); i == 0 || v < su {
			su = v
		}
	}
	return su
}

func (s *HeldSet) Check() error {
	for _, h := range s.helds {
		if err := h.Check(); err != nil {
			return err
		}
	}
	return nil
}

func (s *HeldSet) Leases() []coord.Lease {
	out := make([]coord.Lease, len(s.helds))
	for i, h := range s.helds {
		out[i] = h.Lease()
	}
	return out
}

func (s *HeldSet) Env() map[string]string { return s.env }

func (s *HeldSet) OnSafeUntil(f func(clock.Boot)) {
	s.mu.Lock()
	s.f = f
	s.mu.Unlock()
}

// Renewed is told that one of the holds was renewed.
func (s *HeldSet) Renewed() {
	su := s.SafeUntil()
	s.mu.Lock()
	defer s.mu.Unlock()
	if su > s.last {
		s.last = su
		if s.f != nil {
			s.f(su)
		}
	}
}

// bootSafeUntil is h's safe-until on the boot clock, which the watchdog
// reads (0 for no hold).
func bootSafeUntil(h *fencing.Held) clock.Boot {
	if h == nil {
		return 0
	}
	return h.Stats().SafeUntilBoot
}

// bootHeld is a *fencing.Held as a holdView.
type bootHeld struct{ *fencing.Held }

func (b bootHeld) SafeUntil() clock.Boot { return bootSafeUntil(b.Held) }

// holdOptions are the options of fence run's holds: p's renew interval,
// margin and --no-renew, with the callbacks given.
func holdOptions(p *plan, renewed func(*fencing.Held), renewErr func(error, int)) []fencing.Option {
	o := []fencing.Option{fencing.WithRenewInterval(p.interval), fencing.WithMargin(p.margin),
		fencing.OnRenewed(renewed), fencing.OnRenewError(renewErr)}
	if p.NoRenew {
		o = append(o, fencing.WithoutRenewal())
	}
	return o
}

// holdView is what supervising needs of the lease or leases: a
// *fencing.Held or Options.Holds.
type holdView interface {
	Context() context.Context
	SafeUntil() clock.Boot
	Check() error
}

// commandEnv is the FENCE_ variables of the command: its lease's, or the
// Holds' own.
func (r *runner) commandEnv(deadline clock.Boot) map[string]string {
	if r.p.Holds == nil {
		return leaseEnv(r.held.Lease(), deadline)
	}
	m := map[string]string{}
	for k, v := range r.p.Holds.Env() {
		m[k] = v
	}
	if deadline != 0 {
		m["FENCE_DEADLINE"] = leaseEnv(coord.Lease{}, deadline)["FENCE_DEADLINE"]
	}
	return m
}

// leases are the leases the command's process group is recorded with.
func (r *runner) leases() []coord.Lease {
	if r.p.Holds != nil {
		return r.p.Holds.Leases()
	}
	return []coord.Lease{r.held.Lease()}
}

// useHolds starts supervising under Options.Holds: nothing to acquire.
func (r *runner) useHolds() {
	h := r.p.Holds
	r.hold = h
	h.OnSafeUntil(func(su clock.Boot) {
		r.orders.push(order{Op: opExtend, LeaseStop: su.Add(-r.p.grace)})
	})
	r.verbosef("running under %d leases of %q, safe until the earliest", len(h.Leases()), r.p.Lock)
}
