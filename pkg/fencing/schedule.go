package fencing

import (
	"context"
	"errors"
	"math"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/fence-dev/fence/pkg/clock"
	"github.com/fence-dev/fence/pkg/coord"
)

// A scheduler looks after every hold of a process that runs on one clock
// (the boot clock; each fake clock of a test has its own). One goroutine
// sleeps on one timer until the earliest instant one of its holds must be
// looked at (the hold's wake: its next renewal, the abandonment of a
// renewal in flight, or the first instant past its safe-until), or for
// suspendCheck at most, and then steps every hold: it ends the hold if
// safe-until has passed, sends its renewal when it is due or due within
// the hold's early (see earlyFor), abandons a renewal that hangs.
//
// The scheduler never calls anything that can block: a renewal goes out
// as a Renew call on a goroutine of its own; abandoning a renewal is
// cancelling it, on a goroutine too (however unlikely it is that
// cancelling blocks); a hold's end waits for its callbacks on a goroutine
// (see lose). The answer is applied to the hold by the goroutine that
// delivers it (complete), which also runs the hold's callbacks. So a
// renewal that hangs delays nothing but its own hold's next renewal, and
// every hold's loss is found at its own wake.
//
// The goroutine runs while the scheduler has holds and exits with the last.
type scheduler struct {
	clk clk // its key in schedulers

	mu    sync.Mutex
	holds map[*Held]struct{}
	armed clock.Boot    // the wake the goroutine sleeps until
	poke  chan struct{} // one slot: a hold's wake moved before armed
}

// schedulers maps each clock to its scheduler while the scheduler's
// goroutine runs (while it has holds): one for the boot clock (every
// bootClk is equal), one for each fake clock of a test and one for each
// other clock (a test's own): a hold never joins a scheduler that reads
// another clock.
var schedulers = struct {
	mu sync.Mutex
	m  map[clk]*scheduler
}{m: map[clk]*scheduler{}}

// schedule puts h (its scheduling fields set) on the scheduler of its
// clock, and starts the scheduler's goroutine if it is not running.
func schedule(h *Held) {
	schedulers.mu.Lock()
	defer schedulers.mu.Unlock()
	s := schedulers.m[h.clk]
	if s == nil {
		s = &scheduler{clk: h.clk, holds: map[*Held]struct{}{}, poke: make(chan struct{}, 1)}
		schedulers.m[h.clk] = s
		go s.run()
	}
	h.sched = s
	s.mu.Lock()
	defer s.mu.Unlock()
	s.holds[h] = struct{}{}
	if h.wake < s.armed {
		s.wakeUp()
	}
}

// exit stops the goroutine when no hold is left: it reports false when a
// hold was added meanwhile.
func (s *scheduler) exit() bool {
	schedulers.mu.Lock()
	defer schedulers.mu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.holds) > 0 {
		return false
	}
	delete(schedulers.m, s.clk)
	return true
}

func (s *scheduler) wakeUp() {
	select {
	case s.poke <- struct{}{}:
	default:
	}
}

// suspendCheck is the longest the scheduler sleeps. A system suspend stops
// Go's timers (CLOCK_MONOTONIC) but not the boot clock, on which leases are
// counted: a scheduler asleep until a hold's next renewal could wake long
// after another's safe-until. Reading the boot clock at least this often,
// holds look at it within suspendCheck of a resume.
const suspendCheck = 250 * time.Millisecond

func (s *scheduler) run() {
	t := s.clk.newTimer(time.Hour)
	stopTimer(t)
	for {
		now := s.clk.now()
		wake := clock.Boot(math.MaxInt64)
		s.mu.Lock()
		for h := range s.holds {
			if e := h.step(now); e != nil {
				s.lose(h, e)
			} else {
				wake = min(wake, h.wake)
			}
		}
		s.armed = wake
		s.mu.Unlock()
		if wake == math.MaxInt64 {
			if s.exit() {
				return
			}
			continue
		}
		t.Reset(min(wake.Sub(s.clk.now()), suspendCheck))
		select {
		case <-t.Chan():
		case <-s.poke:
			stopTimer(t)
		}
	}
}

// lose ends h with e (s.mu held), once no answer of h is being applied: a
// goroutine waits for the one in progress (its callbacks may be running),
// so that what a callback reported is in the Stats seen once the context
// has ended.
func (s *scheduler) lose(h *Held, e *LostError) {
	s.drop(h)
	go func() {
		h.cbMu.Lock()
		//lint:ignore SA2001 waits for a callback in progress
		h.cbMu.Unlock()
		h.cancel(e)
	}()
}

// drop takes h off the scheduler (s.mu held): no answer of h is applied
// after it. Its renewal in flight is abandoned by the end of h's context,
// which follows in every case.
func (s *scheduler) drop(h *Held) {
	h.removed = true
	delete(s.holds, h)
	if len(s.holds) == 0 {
		s.wakeUp() // to exit
	}
}

// remove takes h off the scheduler (Release, or its context ended). It
// returns once no callback of h runs, and none will.
func (s *scheduler) remove(h *Held) {
	s.mu.Lock()
	s.drop(h)
	s.mu.Unlock()
	h.cbMu.Lock()
	//lint:ignore SA2001 waits for a callback in progress
	h.cbMu.Unlock()
}

// abandonAfter is how long a renewal may go unanswered before it is
// abandoned and sent again: half the renew interval. The flag rule
// 2·RenewInterval < TTL − margin − grace then leaves room, after the
// renewal due at RenewInterval, for two attempts of RenewInterval/2 each
// before the stop signal, when a whole interval would leave one (a hung
// first attempt given up at 2·RenewInterval left nothing for the second).
func abandonAfter(renew time.Duration) time.Duration { return renew / 2 }

// earlyFor is how early before it is due a renewal every RenewInterval may
// go out: a sixteenth of the interval. Each pass sends the renewals due
// within their early of now together, so that the renewals of many holds
// share a wake-up and a write instead of one each. A renewal sent early is
// one whose safe-until is a little earlier: it never extends a hold
// further than one sent on time would.
func earlyFor(renew time.Duration) time.Duration { return renew / 16 }

// attempt is one renewal of a hold.
type attempt struct {
	h    *Held
	sent clock.Boot // taken before the request is queued
	// sentMono is the monotonic clock read just after sent: a Renewal's
	// Sent later than it (a hedged re-send, answered) moves sent on by
	// as much, on the boot clock only (see complete).
	sentMono time.Time
	end      clock.Boot // when it is abandoned
	// ctx is the request's (it ends with the hold's, and the answer is
	// then ignored); cancel abandons it. abandon is set when it was given
	// up at its end (its answer, an error mostly, is still applied).
	ctx     context.Context
	cancel  func()
	abandon bool
}

// step looks at h at now (s.mu held): it returns the loss found, or sends
// or abandons a renewal when it is time, and sets h's next wake (always
// after now).
func (h *Held) step(now clock.Boot) *LostError {
	su := h.st.SafeUntilBoot
	if now > su {
		return h.lostErr(now, su, h.wake)
	}
	if h.inflight == nil && !h.opts.NoRenew && now >= h.next.Add(-h.early) {
		a := &attempt{h: h, sent: now, sentMono: time.Now(), end: min(now.Add(abandonAfter(h.opts.RenewInterval)), su)}
		// Never blocks: h.ctx's cancellation takes no s.mu (see Held).
		a.ctx, a.cancel = context.WithCancel(h.ctx)
		h.inflight = a
		go a.send()
	}
	if a := h.inflight; a != nil && !a.abandon && now >= a.end {
		// A request that hangs is abandoned; its error comes back to
		// complete, as a failure.
		a.abandon = true
		go a.cancel()
	}
	h.wake = h.plan()
	return nil
}

// plan is h's next wake (s.mu held): the first instant past safe-until, or
// before it the next renewal, or the abandonment of the one in flight.
func (h *Held) plan() clock.Boot {
	wake := h.st.SafeUntilBoot + 1
	if h.inflight == nil && !h.opts.NoRenew {
		wake = min(wake, h.next)
	}
	if a := h.inflight; a != nil && !a.abandon {
		wake = min(wake, a.end)
	}
	return wake
}

// send sends the renewal and applies its answer.
func (a *attempt) send() {
	r, err := a.h.c.Renew(a.ctx, a.h.lease.Name, a.h.lease.ID)
	a.cancel()
	a.complete(r, err)
}

// outcome is what the answer to a renewal does to its hold.
type outcome int

const (
	renewed outcome = iota // acknowledged: safe-until may move later
	failed                 // failed: the next attempt is planned
	lapsed                 // came after safe-until: the hold ends (Unsafe or Paused)
	gone                   // the coordinator reported the lease gone: the hold ends (Lost)
)

// outcomeOf decides what an answer with error err, applied at now to a hold
// whose safe-until is su, does. An answer after safe-until ends the hold
// whatever it says: the lease may have lapsed in between.
func outcomeOf(now, su clock.Boot, err error) outcome {
	switch {
	case now > su:
		return lapsed
	case err == nil:
		return renewed
	case errors.Is(err, coord.ErrLeaseLost):
		return gone
	}
	return failed
}

// nextSend is when the attempt after an answer goes out: a renewal
// interval after the acknowledged attempt's send, a retry interval after a
// failure, or at once after a failure of an attempt given up at its end
// (the wait is spent already).
func nextSend(o outcome, now, sent clock.Boot, abandoned bool, renew, retry time.Duration) clock.Boot {
	switch {
	case o == renewed:
		return sent.Add(renew)
	case abandoned:
		return now
	}
	return now.Add(retry)
}

// complete applies the answer to a renewal, on the goroutine that delivered
// it, and runs the hold's callbacks (see outcomeOf).
func (a *attempt) complete(r coord.Renewal, err error) {
	h := a.h
	s := h.sched
	h.cbMu.Lock()
	defer h.cbMu.Unlock()
	now := h.clk.now()
	s.mu.Lock()
	if h.removed {
		s.mu.Unlock()
		return // the hold ended
	}
	h.inflight = nil
	o := outcomeOf(now, h.st.SafeUntilBoot, err)
	if o == lapsed || o == gone {
		lost := h.lostErr(now, h.st.SafeUntilBoot, h.wake)
		if o == gone {
			lost = &LostError{Reason: Lost, Lock: h.lease.Name, Token: h.lease.Token, SafeUntil: h.clk.toTime(h.st.SafeUntilBoot),
				Failures: h.st.Consecutive, LastErr: err}
		}
		s.drop(h)
		s.mu.Unlock()
		h.cancel(lost)
		return
	}
	extended := false
	if o == failed {
		h.st.Failures++
		h.st.Consecutive++
		h.st.LastError = err
	} else {
		extended = h.acknowledged(a, r)
	}
	h.next = nextSend(o, now, a.sent, a.abandon, h.opts.RenewInterval, h.opts.RetryInterval)
	if h.wake = h.plan(); h.wake < s.armed {
		s.wakeUp()
	}
	s.mu.Unlock()
	if f := h.opts.OnRenewal; f != nil && (o == failed || extended) {
		f(h, err)
	}
}

// acknowledged applies the acknowledgment r of a (s.mu held): it returns
// whether the renewal's safe-until moved the hold's later.
func (h *Held) acknowledged(a *attempt, r coord.Renewal) (extended bool) {
	ttl := r.TTL
	if ttl <= 0 {
		ttl = h.lease.TTL
	}
	sent := a.sent
	if _, real := h.clk.(bootClk); real && r.Sent.After(a.sentMono) {
		// The acknowledged request left after the attempt began (the
		// coordinator sent it again through another member): its own
		// send time counts. sentMono was read after sent, and the
		// monotonic clock never runs faster than the boot clock, so
		// this is never later than the real send.
		sent = sent.Add(r.Sent.Sub(a.sentMono))
	}
	nsu := sent.Add(ttl - h.opts.Margin)
	h.st.Renewals++
	h.st.Consecutive = 0
	extended = nsu > h.st.SafeUntilBoot
	if extended {
		h.st.SafeUntilBoot = nsu
	}
	return extended
}

// stopTimer stops t and drains its channel (a fake timer's channel keeps a
// value that Reset does not take out).
func stopTimer(t clockwork.Timer) {
	t.Stop()
	select {
	case <-t.Chan():
	default:
	}
}
