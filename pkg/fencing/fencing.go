// Package fencing keeps a lease alive for a Go program and tells it, through
// a context, the moment the lease can no longer be trusted.
//
// Hold renews a lease every third of its TTL (in the manner of restic's lock
// refresh) and tracks its safe-until: the send time of the last acknowledged
// renewal (or of the grant) plus the granted TTL, less a margin. The
// coordinator starts counting the TTL no earlier than it received the
// request, so until safe-until the lease is certainly still held. The
// context of the Held is cancelled, with a *LostError as its cause, when
//
//   - a renewal reports the lease gone (coord.ErrLeaseLost: expired, revoked,
//     or released by someone else): Reason Lost;
//   - safe-until passes with no newer acknowledgment (the coordinator is slow
//     or unreachable): Reason Unsafe;
//   - the process wakes up past safe-until after it was paused (SIGSTOP, a
//     long stall, a system suspend): Reason Paused. A renewal acknowledged
//     after safe-until does not save the hold: the lease may have lapsed in
//     between, and another holder may have worked under a newer token.
//
// Work done under the lease should stop when the context ends; storage that
// accepts writes should check the fencing token (Held.Token) so that a
// holder that did not stop in time is refused.
//
// Time is read from clock.Boot (CLOCK_BOOTTIME): it never jumps and, unlike
// Go's monotonic clock, it counts time spent in system suspend, so a laptop
// that slept through the TTL does not believe its lease is still safe.
package fencing

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/fence-dev/fence/pkg/clock"
	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/internal/coordkit"
)

// ErrReleased is the cause of Held.Context() after Release.
var ErrReleased = errors.New("lease released")

// Reason says why a lease can no longer be trusted.
type Reason int

const (
	// Lost: the coordinator reported the lease gone (expired, revoked or
	// released elsewhere).
	Lost Reason = iota + 1
	// Unsafe: safe-until passed with no newer acknowledged renewal.
	Unsafe
	// Paused: the process was not running (stopped, stalled, suspended)
	// when safe-until passed, and found out on waking.
	Paused
)

// LostError is the cause of Held.Context() when the lease can no longer be
// trusted. errors.Is(err, coord.ErrLeaseLost) holds for it.
type LostError struct {
	Reason Reason
	Lock   string
	Token  uint64
	// SafeUntil is the safe-until that passed (Unsafe, Paused) or the last
	// one known (Lost).
	SafeUntil time.Time
	// Late is how far past SafeUntil the loss was detected (Unsafe, Paused).
	Late time.Duration
	// NoRenew is set when the hold did not renew (WithoutRenewal).
	NoRenew bool
	// Failures counts the renewals that failed since the last
	// acknowledgment; LastErr is the last of them (or, for Lost, the error
	// that reported the loss).
	Failures int
	LastErr  error
}

func (e *LostError) Error() string {
	head := fmt.Sprintf("lease on %q (token %d)", e.Lock, e.Token)
	switch e.Reason {
	case Lost:
		detail := "expired or revoked"
		if e.LastErr != nil {
			// The backend's error wraps coord.ErrLeaseLost: say it once.
			detail = strings.TrimPrefix(e.LastErr.Error(), coord.ErrLeaseLost.Error()+": ")
		}
		if detail == coord.ErrLeaseLost.Error() {
			detail = "expired or revoked"
		}
		return fmt.Sprintf("%s was lost on the coordinator (%s)", head, detail)
	case Paused:
		return fmt.Sprintf("%s is no longer safe: this process was paused or starved and woke %v past its safe-until",
			head, e.Late.Round(time.Millisecond))
	default:
		if e.NoRenew {
			return head + " reached the end of what its TTL covers (not renewed)"
		}
		msg := head + " is no longer safe: no renewal was acknowledged in time"
		switch {
		case e.Failures == 1:
			msg += fmt.Sprintf(" (1 attempt failed: %v)", e.LastErr)
		case e.Failures > 1:
			msg += fmt.Sprintf(" (%d attempts failed, last: %v)", e.Failures, e.LastErr)
		}
		return msg
	}
}

// Unwrap makes errors.Is(err, coord.ErrLeaseLost) true.
func (e *LostError) Unwrap() error { return coord.ErrLeaseLost }

// DefaultMargin is the margin Hold uses when none is given: a tenth of the
// TTL, at least 100ms and at most 2s, and never more than a fifth of the TTL
// (so that very short TTLs stay usable). The fractions are rounded up, never
// down to nothing: a positive TTL gets a positive margin.
func DefaultMargin(ttl time.Duration) time.Duration {
	m := min(max(ceilDiv(ttl, 10), 100*time.Millisecond), 2*time.Second)
	return min(m, ceilDiv(ttl, 5))
}

// ceilDiv is d/n rounded up (d >= 0, n > 0): the fraction of a duration
// that a safety rule uses, which must not round down (1ns/3 is 1ns, not 0).
func ceilDiv(d time.Duration, n int64) time.Duration {
	q := d / time.Duration(n)
	if d%time.Duration(n) != 0 {
		q++
	}
	return q
}

// holdConfig is what the Options set (see each Option). The zero value
// renews every TTL/3 with DefaultMargin.
type holdConfig struct {
	RenewInterval time.Duration // WithRenewInterval; default granted TTL / 3
	// RetryInterval is the wait after a failed renewal before the next
	// attempt (default RenewInterval/4). No Option sets it.
	RetryInterval time.Duration
	Margin        time.Duration // WithMargin; default DefaultMargin(TTL)
	NoRenew       bool          // WithoutRenewal
	// OnRenewal, when set, is told of the renewals (see the Option
	// OnRenewal): with err nil after each acknowledged renewal that moved
	// the safe-until later, with the error after each failed one.
	OnRenewal func(h *Held, err error)
	// Keep is how long Do keeps the completion record (0: coord.DefaultKeep).
	Keep time.Duration
}

// Option tunes Hold, Acquire, AcquireSet and Do. With none, a hold renews
// every TTL/3 with DefaultMargin.
type Option func(*holdConfig)

// WithRenewInterval sets the time from one renewal's send to the next
// (default: granted TTL / 3). Two renewal attempts must fit before
// safe-until: 2*d < TTL - margin. A renewal may go out up to d/16 early,
// with the renewals of other holds that fall due then; never late. A
// failed renewal is retried after d/4; one not answered within d/2 is
// abandoned and retried at once.
func WithRenewInterval(d time.Duration) Option {
	return func(c *holdConfig) { c.RenewInterval = d }
}

// WithMargin sets what is subtracted from the renewal's send time plus the
// TTL: it covers what has to happen after safe-until before the lease really
// expires (the caller stopping its work, clock rate differences). Default
// DefaultMargin(TTL).
func WithMargin(d time.Duration) Option { return func(c *holdConfig) { c.Margin = d } }

// WithoutRenewal holds the lease without renewing it: the context ends at
// the first safe-until (Reason Unsafe, LostError.NoRenew set).
func WithoutRenewal() Option { return func(c *holdConfig) { c.NoRenew = true } }

// OnRenewal sets a function told of the renewals: with err nil and the
// hold after each acknowledged renewal that moved its safe-until later (not
// for the initial one); with the error after each failed renewal
// (h.Stats().Consecutive counts the failures since the last
// acknowledgment). For a Set, an acknowledgment is told with the hold whose
// safe-until comes first, each time the set's safe-until becomes later; a
// failure of any of the leases with its hold. f must not block: it runs on
// the goroutine that delivered the renewal's answer, which may deliver the
// answers of other holds too (etcd: the keep-alive stream's receiver). The
// calls of one hold are made one at a time, in order, and none once Release
// returned. It may call the hold's Stats, not Release.
func OnRenewal(f func(h *Held, err error)) Option {
	return func(c *holdConfig) { c.OnRenewal = f }
}

// WithKeep sets how long Do keeps the completion record (default
// coord.DefaultKeep). Use at least the time during which the job must not
// run again. Hold and AcquireSet ignore it.
func WithKeep(d time.Duration) Option { return func(c *holdConfig) { c.Keep = d } }

// configOf applies opts.
func configOf(opts []Option) holdConfig {
	var c holdConfig
	for _, o := range opts {
		o(&c)
	}
	return c
}

// Stats is a snapshot of a hold's renewals.
type Stats struct {
	// Renewals counts acknowledged renewals; Failures counts failed renewal
	// attempts (all of them); Consecutive the failures since the last
	// acknowledgment.
	Renewals, Failures, Consecutive int
	// LastError is the last renewal error (nil if none failed).
	LastError error
	// SafeUntil is the current safe-until, on this process's clock.
	SafeUntil time.Time
	// SafeUntilBoot is the same instant on the boot clock (package clock),
	// for a supervisor that hands it to another process; it is exact where
	// SafeUntil is converted, and unlike a time.Time it keeps counting
	// while the host is suspended.
	SafeUntilBoot clock.Boot
	// Margin and RenewInterval are the ones in use (WithMargin,
	// WithRenewInterval, or their defaults for the lease's TTL).
	Margin, RenewInterval time.Duration
}

// Held is a lease kept alive by Hold. Its methods are safe for concurrent
// use.
//
// A Held has no goroutine of its own: the holds of a process share one
// scheduler goroutine (one per clock), which sends each renewal when it is
// due and ends each hold at its safe-until; a renewal's answer is applied
// by the goroutine that receives it (see scheduler).
//
// Lock order. A goroutine holding one of these locks takes only those to
// its right: schedulers.mu → h.cbMu → sched.mu.
//   - schedulers.mu → sched.mu: schedule and exit (a scheduler joins or
//     leaves the map while its holds are looked at).
//   - h.cbMu → sched.mu: attempt.complete applies an answer (cbMu for the
//     whole of it and its callbacks, sched.mu for the hold's fields).
//   - scheduler.lose and scheduler.remove take cbMu only after releasing
//     sched.mu (lose on a goroutine of its own), to wait for a callback in
//     progress.
//   - h.cancel is never called with sched.mu held: the context's AfterFunc
//     (remove) takes sched.mu and cbMu, on a goroutine of its own.
//
// The callback (OnRenewal) runs under cbMu only: it may call Stats
// (sched.mu), not Release (which waits for cbMu).
type Held struct {
	c      coord.Coordinator
	lease  coord.Lease
	clk    clk
	opts   holdConfig
	ctx    context.Context
	cancel context.CancelCauseFunc

	// cbMu is held while an answer is applied and the callbacks run.
	cbMu sync.Mutex

	// Guarded by sched.mu once the hold is scheduled.
	sched    *scheduler
	st       Stats         // its SafeUntilBoot is the safe-until
	wake     clock.Boot    // when the scheduler looks at the hold next
	next     clock.Boot    // the next renewal's send
	early    time.Duration // how much earlier than next it may go out
	inflight *attempt      // the renewal in flight
	removed  bool          // released, lost or ended: no more renewals
}

// pauseTolerance is how late past its planned wake-up the scheduler may
// run before a loss is put down to the process having been paused rather
// than to the renewals having failed. It only chooses the Reason.
const pauseTolerance = 100 * time.Millisecond

// Acquire takes a lease with c.Acquire and holds it (see Hold). If Hold
// refuses the options, the lease is released and the error returned.
func Acquire(ctx context.Context, c coord.Coordinator, name string, acq coord.AcquireOptions, options ...Option) (*Held, error) {
	opts := configOf(options)
	acq, err := coordkit.CheckAcquire(name, acq) // the TTL that opts must fit (15s for 0)
	if err != nil {
		return nil, err
	}
	if _, err := opts.resolve(acq.TTL); err != nil {
		return nil, err
	}
	l, err := c.Acquire(ctx, name, acq)
	if err != nil {
		return nil, err
	}
	h, err := holdOn(ctx, c, l, opts, bootClk{})
	if err != nil {
		releaseQuietly(ctx, c, l)
		return nil, err
	}
	return h, nil
}

// releaseQuietly releases l on c, past ctx's end and within 5 s, after a
// failure that is the error to report (the lease otherwise ends at its TTL).
func releaseQuietly(ctx context.Context, c coord.Coordinator, l *coord.Lease) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_ = c.Release(rctx, l.Name, l.ID)
}

// Hold keeps lease renewed on c until Release or until ctx ends, and returns
// at once. The lease's Sent must be the send time of the request that
// granted it (as Coordinator.Acquire and Renew report it); a lease with no
// Sent is renewed once before Hold returns. Hold fails with an error wrapping
// coord.ErrInvalid when the options cannot keep the lease safe, and with a
// *LostError when the lease is already past its safe-until.
//
// When ctx ends, renewals stop and Context() ends with ctx's cause; the
// lease then runs out at its TTL unless released.
func Hold(ctx context.Context, c coord.Coordinator, lease *coord.Lease, opts ...Option) (*Held, error) {
	return holdOn(ctx, c, lease, configOf(opts), bootClk{})
}

// holdOn is Hold on clock k (a test's fake clock: see export_test.go).
func holdOn(ctx context.Context, c coord.Coordinator, lease *coord.Lease, opts holdConfig, k clk) (*Held, error) {
	if lease == nil {
		return nil, fmt.Errorf("%w: no lease to hold", coord.ErrInvalid)
	}
	opts, err := opts.resolve(lease.TTL)
	if err != nil {
		return nil, err
	}
	h := &Held{c: c, lease: *lease, opts: opts, clk: k}

	sent := h.clk.now() // the send time of the renewal below, for a lease with no Sent
	if !lease.Sent.IsZero() {
		sent = h.clk.toBoot(lease.Sent)
	} else if r, err := c.Renew(ctx, lease.Name, lease.ID); errors.Is(err, coord.ErrLeaseLost) {
		return nil, &LostError{Reason: Lost, Lock: lease.Name, Token: lease.Token, LastErr: err}
	} else if err != nil {
		return nil, fmt.Errorf("renew lease on %q: %w", lease.Name, err)
	} else if r.TTL > 0 {
		h.lease.TTL = r.TTL
	}
	su := sent.Add(h.lease.TTL - h.opts.Margin)
	h.st.SafeUntilBoot = su
	if now := h.clk.now(); now > su {
		return nil, h.lostErr(now, su, su)
	}
	h.ctx, h.cancel = context.WithCancelCause(ctx)
	h.next = sent.Add(h.opts.RenewInterval)
	h.early = earlyFor(h.opts.RenewInterval)
	h.wake = h.plan()
	schedule(h)
	// However the context ends (ctx, a loss, Release), the hold leaves the
	// scheduler and its renewal in flight is abandoned.
	context.AfterFunc(h.ctx, func() { h.sched.remove(h) })
	return h, nil
}

// resolve is o with the defaults for a lease of ttl filled in, or an error
// wrapping coord.ErrInvalid when it cannot keep the lease safe.
func (o holdConfig) resolve(ttl time.Duration) (holdConfig, error) {
	if ttl <= 0 {
		return o, fmt.Errorf("%w: lease TTL must be positive, got %v", coord.ErrInvalid, ttl)
	}
	if o.RenewInterval < 0 || o.RetryInterval < 0 || o.Margin < 0 {
		return o, fmt.Errorf("%w: negative renew interval, retry interval or margin", coord.ErrInvalid)
	}
	if o.RenewInterval == 0 {
		o.RenewInterval = ceilDiv(ttl, 3)
	}
	if o.RetryInterval == 0 {
		o.RetryInterval = max(o.RenewInterval/4, time.Millisecond)
	}
	if o.Margin == 0 {
		o.Margin = DefaultMargin(ttl)
	}
	if o.Margin >= ttl {
		return o, fmt.Errorf("%w: margin %v leaves nothing of the TTL %v", coord.ErrInvalid, o.Margin, ttl)
	}
	if !o.NoRenew && 2*o.RenewInterval >= ttl-o.Margin {
		return o, fmt.Errorf("%w: renew interval %v leaves no room for two renewal attempts before the lease's safe-until (TTL %v - margin %v)",
			coord.ErrInvalid, o.RenewInterval, ttl, o.Margin)
	}
	return o, nil
}

// Context is cancelled when the lease can no longer be trusted (cause: a
// *LostError), after Release (cause ErrReleased), or when the context given
// to Hold ends (its cause). context.Cause(h.Context()) says which.
func (h *Held) Context() context.Context { return h.ctx }

// Check reads the clock now and returns nil if the lease is still safe,
// else the cause of Context() (context.Cause(h.Context()) without
// reading the clock). Call it right before an action that must not
// happen without the lease (a write to storage that does not check tokens):
// a process that was just resumed after a pause may run briefly before the
// scheduler cancels Context(), and Check closes that gap. When it finds
// safe-until passed, it cancels Context() itself.
func (h *Held) Check() error {
	if err := context.Cause(h.ctx); err != nil {
		return err
	}
	var lost *LostError
	now := h.clk.now()
	h.sched.mu.Lock()
	if su := h.st.SafeUntilBoot; now > su {
		lost = h.lostErr(now, su, su)
	}
	h.sched.mu.Unlock()
	if lost == nil {
		return nil
	}
	h.cancel(lost)
	return context.Cause(h.ctx)
}

// Lease returns the held lease as granted.
func (h *Held) Lease() coord.Lease { return h.lease }

// Token is the lease's fencing token.
func (h *Held) Token() uint64 { return h.lease.Token }

// Stats returns a snapshot of the renewals so far.
func (h *Held) Stats() Stats {
	h.sched.mu.Lock()
	st := h.st
	h.sched.mu.Unlock()
	st.SafeUntil = h.clk.toTime(st.SafeUntilBoot)
	st.Margin, st.RenewInterval = h.opts.Margin, h.opts.RenewInterval
	return st
}

// Release stops renewing, cancels Context() (cause ErrReleased unless it was
// already cancelled) and releases the lease on the coordinator. It may be
// called more than once and after the lease was lost: releasing a lease that
// is gone is not an error.
func (h *Held) Release(ctx context.Context) error {
	h.sched.remove(h)
	h.cancel(ErrReleased)
	if err := h.c.Release(ctx, h.lease.Name, h.lease.ID); err != nil {
		return fmt.Errorf("release lease on %q: %w", h.lease.Name, err)
	}
	return nil
}

// lostErr builds the error for safe-until su found passed at now; planned
// is when the scheduler meant to look at the clock (so now-planned is how long
// the process did not run when it should have). sched.mu is held, or h is
// not scheduled yet.
func (h *Held) lostErr(now, su, planned clock.Boot) *LostError {
	r := Unsafe
	if now.Sub(max(planned, su)) > pauseTolerance {
		r = Paused
	}
	return &LostError{Reason: r, Lock: h.lease.Name, Token: h.lease.Token, SafeUntil: h.clk.toTime(su), Late: now.Sub(su),
		NoRenew: h.opts.NoRenew, Failures: h.st.Consecutive, LastErr: h.st.LastError}
}

// clk is the time source of a hold: the boot clock, or a fake for tests.
type clk interface {
	now() clock.Boot
	toBoot(time.Time) clock.Boot
	toTime(clock.Boot) time.Time
	newTimer(time.Duration) clockwork.Timer
}

// bootClk is the boot clock. Every bootClk is equal to every other: the
// holds on it share one scheduler (see schedulers).
type bootClk struct{}

func (bootClk) now() clock.Boot                          { return clock.Now() }
func (bootClk) toBoot(t time.Time) clock.Boot            { return clock.Now().Add(-time.Since(t)) }
func (bootClk) toTime(t clock.Boot) time.Time            { return time.Now().Add(t.Sub(clock.Now())) }
func (bootClk) newTimer(d time.Duration) clockwork.Timer { return clockwork.NewRealClock().NewTimer(d) }
