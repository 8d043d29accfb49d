package supervise

import (
	"syscall"
	"time"

	"github.com/fence-dev/fence/pkg/clock"
)

// The supervision of one command, in fence (Runner.supervise) and in the
// watchdog (watchdog.run), goes through the same phases, on the same rules
// of time: this file holds them, as pure functions that both loops call.

// phase is where the supervision of the command stands.
type phase uint8

const (
	// phaseWaiting: no command yet; the watchdog waits for fence's start
	// order.
	phaseWaiting phase = iota
	// phaseRunning: the command runs; its stop sequence starts at
	// stopStart unless the lease is extended first.
	phaseRunning
	// phaseStopping: the stop signal was sent, or, for the watchdog, the
	// command ended on its own and what it left behind was signalled;
	// SIGKILL follows at killTime.
	phaseStopping
	// phaseKilling: SIGKILL was sent, and is sent again to what is left
	// until nothing of the command's tree is.
	phaseKilling
	// phaseDone: nothing is left to follow: the command ended and its tree
	// is empty, it could not be started, or (fence) the watchdog is gone.
	phaseDone
)

// step is what moves a supervision from one phase to the next.
type step uint8

const (
	// stepStart: the command was started.
	stepStart step = iota
	// stepStop: the stop sequence starts: the stop time came, or fence asked
	// (stop order), lost the lease, was cancelled, or (the watchdog) is
	// gone. Before the command started it means that there is none to
	// start.
	stepStop
	// stepEnded: the command ended on its own while it ran; the watchdog
	// stops what it left behind as it would stop the command.
	stepEnded
	// stepKill: SIGKILL time came.
	stepKill
	// stepDone: nothing is left to follow.
	stepDone
)

// next is the phase after step s. A step that does not apply to a phase
// (a second stop, a kill before the stop) leaves it as it is; nothing
// leaves phaseDone, and nothing goes back.
func (ph phase) next(s step) phase {
	switch {
	case ph == phaseDone || s == stepDone:
		return phaseDone
	case ph == phaseWaiting && s == stepStart:
		return phaseRunning
	case ph == phaseWaiting && s == stepStop:
		return phaseDone // nothing was started: nothing to stop
	case ph == phaseRunning && (s == stepStop || s == stepEnded):
		return phaseStopping
	case ph == phaseStopping && s == stepKill:
		return phaseKilling
	}
	return ph
}

// stopping reports whether the stop sequence runs (stopping or killing).
func (ph phase) stopping() bool { return ph == phaseStopping || ph == phaseKilling }

// leaseStopOf is when the stop sequence must start for a lease safe until
// safeUntil: the stop signal, the grace period and SIGKILL all come before
// safe-until.
func leaseStopOf(safeUntil clock.Boot, grace time.Duration) clock.Boot {
	return safeUntil.Add(-grace)
}

// stopStart is when the stop sequence must start, and why: at the deadline
// (0: none) when it comes no later than the lease's stop time, else at the
// lease's stop time. fence and the watchdog each judge it, with the same
// stop times: either alone stops the command in time.
func stopStart(leaseStop, deadline clock.Boot) (clock.Boot, string) {
	if deadline != 0 && deadline <= leaseStop {
		return deadline, reasonDeadline
	}
	return leaseStop, reasonLease
}

// killTime is when SIGKILL follows a stop signal sent at now: after the
// grace period, and no later than the lease's safe-until (leaseStop +
// grace), which a stop that started late (the process was frozen) must
// still keep.
func killTime(now, leaseStop clock.Boot, grace time.Duration) clock.Boot {
	return min(now.Add(grace), leaseStop.Add(grace))
}

// schedule is what a supervision loop waits for in its phase; zero times
// are not waited for.
type schedule struct {
	phase phase
	// stop (running): when the stop sequence must start (stopStart).
	stop clock.Boot
	// signalAt (stopping, killing): fence's own stop signal, still to be
	// sent.
	signalAt clock.Boot
	// killAt (stopping): SIGKILL.
	killAt clock.Boot
	// again (stopping, killing): the next look without an event to wake
	// for: a SIGKILL pass over what is left; the watchdog's look for an
	// empty tree.
	again clock.Boot
}

// nextWake is when a loop in schedule s, at now, must wake: at the first
// of its times, and at the latest recheck after now. A time that has passed
// is now: the loop acts at once.
func nextWake(s schedule, now clock.Boot) clock.Boot {
	wake := now.Add(recheck)
	at := func(t clock.Boot) {
		if t != 0 {
			wake = min(wake, t)
		}
	}
	switch s.phase {
	case phaseRunning:
		at(s.stop)
	case phaseStopping:
		at(s.signalAt)
		at(s.killAt)
		at(s.again)
	case phaseKilling:
		at(s.signalAt)
		at(s.again)
	}
	return max(wake, now)
}

// ownStop is fence's own stop sequence, which backs the watchdog's: a
// watchdog frozen or killed before it acted must not leave the command
// running. It gives the watchdog an allowance to act first, then sends the
// stop signal itself unless the watchdog reported its own, and SIGKILL from
// killTime on, every killRepeat until the watchdog reports the end.
type ownStop struct {
	signalAt clock.Boot // the stop signal, unless sent or not needed (0)
	killAt   clock.Boot // the first SIGKILL
	lastKill clock.Boot // the last SIGKILL sent (0: none yet)
}

// killRepeat is how often fence sends SIGKILL again once it has started to.
const killRepeat = 50 * time.Millisecond

// beginOwnStop plans fence's own stop sequence at now for signal sig.
func beginOwnStop(now, leaseStop clock.Boot, grace time.Duration, sig syscall.Signal) ownStop {
	allowance := min(grace/4, 100*time.Millisecond) // the watchdog acts first
	o := ownStop{signalAt: now.Add(allowance), killAt: killTime(now, leaseStop, grace)}
	if sig == syscall.SIGKILL {
		// Only SIGKILL is sent, after the same allowance.
		o.killAt, o.signalAt = o.signalAt, 0
	}
	return o
}

// due says what fence's own stop sends at now, and records it as sent:
// the stop signal (its time came and the watchdog has not reported its
// own: wdStopped), SIGKILL (its time came, and killRepeat passed since the
// last one).
func (o *ownStop) due(now clock.Boot, wdStopped bool) (signal, kill bool) {
	if o.signalAt != 0 && (wdStopped || now >= o.signalAt) {
		signal = !wdStopped
		o.signalAt = 0 // sent, or the watchdog's was: never again
	}
	if now >= o.killAt && (o.lastKill == 0 || now.Sub(o.lastKill) >= killRepeat) {
		kill = true
		o.lastKill = now
	}
	return signal, kill
}

// schedule is what fence's loop waits for while it stops the command in
// phase ph.
func (o *ownStop) schedule(ph phase) schedule {
	s := schedule{phase: ph, signalAt: o.signalAt, killAt: o.killAt}
	if o.lastKill != 0 {
		s.again = o.lastKill.Add(killRepeat)
	}
	return s
}
