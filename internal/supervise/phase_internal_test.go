package supervise

import (
	"math"
	"syscall"
	"testing"
	"time"

	"github.com/fence-dev/fence/internal/clock"
)

// TestPhaseNext: every step from every phase.
func TestPhaseNext(t *testing.T) {
	const (
		W = phaseWaiting
		R = phaseRunning
		S = phaseStopping
		K = phaseKilling
		D = phaseDone
	)
	steps := []step{stepStart, stepStop, stepEnded, stepKill, stepDone}
	// want[from][step], steps in the order above.
	want := map[phase][5]phase{
		W: {R, D, W, W, D}, // a stop before the start: nothing to stop
		R: {R, S, S, R, D}, // a kill comes only after the stop signal
		S: {S, S, S, K, D}, // a second stop, or the end, changes nothing
		K: {K, K, K, K, D},
		D: {D, D, D, D, D}, // nothing leaves done
	}
	for from, row := range want {
		for i, s := range steps {
			if got := from.next(s); got != row[i] {
				t.Errorf("%v.next(step %d) = %v, want %v", from, s, got, row[i])
			}
		}
	}
	for ph, want := range map[phase]bool{W: false, R: false, S: true, K: true, D: false} {
		if ph.stopping() != want {
			t.Errorf("%v.stopping() = %v", ph, !want)
		}
	}
	if s := phase(9).String(); s != "phase(9)" {
		t.Errorf("phase(9) reads %q", s)
	}
}

// at is an instant on the boot clock, in seconds from an arbitrary origin.
func at(sec float64) clock.Boot {
	return clock.Boot(1000*time.Second + time.Duration(math.Round(sec*float64(time.Second))))
}

// TestStopStart: the deadline when it comes first or at the same time,
// else the lease's stop time; no deadline is 0.
func TestStopStart(t *testing.T) {
	for _, c := range []struct {
		leaseStop, deadline clock.Boot
		when                clock.Boot
		why                 string
	}{
		{at(10), 0, at(10), reasonLease},
		{at(10), at(5), at(5), reasonDeadline},
		{at(10), at(10), at(10), reasonDeadline}, // a tie goes to the deadline (exit 124)
		{at(10), at(10.001), at(10), reasonLease},
		{at(10), at(60), at(10), reasonLease},
		{at(0), 0, at(0), reasonLease},
	} {
		when, why := stopStart(c.leaseStop, c.deadline)
		if when != c.when || why != c.why {
			t.Errorf("stopStart(lease stop %v, deadline %v) = %v, %s; want %v, %s", c.leaseStop, c.deadline, when, why, c.when, c.why)
		}
	}
	if got := leaseStopOf(at(13.5), 3*time.Second); got != at(10.5) {
		t.Errorf("leaseStopOf(13.5 s, grace 3 s) = %v, want 10.5 s", got)
	}
}

// TestKillTime: SIGKILL after the grace period, but no later than the
// lease's safe-until (its stop time + grace) when the stop started late.
func TestKillTime(t *testing.T) {
	const grace = 3 * time.Second
	for _, c := range []struct {
		now, leaseStop, want clock.Boot
	}{
		{at(5), at(10), at(8)},   // a deadline or an order: grace from now
		{at(10), at(10), at(13)}, // on time
		{at(11), at(10), at(13)}, // a late start: safe-until still holds
		{at(20), at(10), at(13)}, // frozen past safe-until: at once
		{at(9.9), at(10), at(12.9)},
	} {
		if got := killTime(c.now, c.leaseStop, grace); got != c.want {
			t.Errorf("killTime(now %v, lease stop %v) = %v, want %v", c.now, c.leaseStop, got, c.want)
		}
	}
}

// TestNextWake: the first due time of the phase, at the latest recheck
// from now, never before now.
func TestNextWake(t *testing.T) {
	now := at(10)
	for _, c := range []struct {
		name string
		s    schedule
		want clock.Boot
	}{
		{"running, stop far", schedule{phase: phaseRunning, stop: at(20)}, now.Add(recheck)},
		{"running, stop soon", schedule{phase: phaseRunning, stop: at(10.03)}, at(10.03)},
		{"running, stop passed", schedule{phase: phaseRunning, stop: at(9)}, now},
		{"running ignores stopping's times", schedule{phase: phaseRunning, stop: at(20), killAt: at(10.01), again: at(10.01)}, now.Add(recheck)},
		{"stopping, kill far", schedule{phase: phaseStopping, killAt: at(13)}, now.Add(recheck)},
		{"stopping, kill soon", schedule{phase: phaseStopping, killAt: at(10.05)}, at(10.05)},
		{"stopping, own signal first", schedule{phase: phaseStopping, signalAt: at(10.02), killAt: at(10.05)}, at(10.02)},
		{"stopping, a look first", schedule{phase: phaseStopping, killAt: at(13), again: at(10.004)}, at(10.004)},
		{"stopping ignores the stop time", schedule{phase: phaseStopping, stop: at(9), killAt: at(13)}, now.Add(recheck)},
		{"stopping, own signal passed", schedule{phase: phaseStopping, signalAt: at(9.9), killAt: at(13)}, now},
		{"killing, next pass", schedule{phase: phaseKilling, killAt: at(9), again: at(10.05)}, at(10.05)},
		{"killing, own signal still due", schedule{phase: phaseKilling, signalAt: at(10.01), again: at(10.05)}, at(10.01)},
		{"killing, no pass", schedule{phase: phaseKilling}, now.Add(recheck)},
		{"waiting", schedule{phase: phaseWaiting, stop: at(9)}, now.Add(recheck)},
		{"done", schedule{phase: phaseDone, killAt: at(9)}, now.Add(recheck)},
	} {
		if got := nextWake(c.s, now); got != c.want {
			t.Errorf("%s: nextWake = %v, want %v (now %v)", c.name, got, c.want, now)
		}
	}
}

// TestOwnStop: fence's own stop sequence over time: its stop signal after
// the allowance unless the watchdog reported its own, SIGKILL from the
// kill time on, every killRepeat; with --signal KILL only SIGKILL, after
// the allowance; and what the loop sleeps for meanwhile.
func TestOwnStop(t *testing.T) {
	type tick struct {
		now          clock.Boot
		wdStopped    bool
		signal, kill bool
		wake         clock.Boot // nextWake after the tick
	}
	for _, c := range []struct {
		name      string
		begin     clock.Boot
		leaseStop clock.Boot
		grace     time.Duration
		sig       syscall.Signal
		ticks     []tick
	}{
		{name: "watchdog silent", begin: at(10), leaseStop: at(10), grace: 3 * time.Second, sig: syscall.SIGTERM,
			ticks: []tick{
				{now: at(10), wake: at(10.1)},                     // allowance min(3s/4, 100ms)
				{now: at(10.1), signal: true, wake: at(10.2)},     // then a recheck
				{now: at(10.2), wake: at(10.3)},                   // signalled once only
				{now: at(12.95), wake: at(13)},                    // up to the kill time
				{now: at(13), kill: true, wake: at(13.05)},        // SIGKILL
				{now: at(13.03), wake: at(13.05)},                 // not again before killRepeat
				{now: at(13.05), kill: true, wake: at(13.1)},      // again
				{now: at(13.2), kill: true, wake: at(13.25)},      // again
				{now: at(13.2), wdStopped: true, wake: at(13.25)}, // a late report changes nothing
			}},
		{name: "watchdog first", begin: at(10), leaseStop: at(10), grace: 3 * time.Second, sig: syscall.SIGTERM,
			ticks: []tick{
				{now: at(10), wake: at(10.1)},
				// The watchdog reported its stop: fence sends none, and
				// no longer wakes for it (it once spun until SIGKILL).
				{now: at(10.05), wdStopped: true, wake: at(10.15)},
				{now: at(10.1), wdStopped: true, wake: at(10.2)},
				{now: at(12.99), wdStopped: true, wake: at(13)},
				{now: at(13), wdStopped: true, kill: true, wake: at(13.05)},
			}},
		{name: "short grace", begin: at(10), leaseStop: at(20), grace: 200 * time.Millisecond, sig: syscall.SIGINT,
			ticks: []tick{
				{now: at(10), wake: at(10.05)}, // allowance grace/4
				{now: at(10.05), signal: true, wake: at(10.15)},
				{now: at(10.2), kill: true, wake: at(10.25)},
			}},
		{name: "late start", begin: at(12.95), leaseStop: at(10), grace: 3 * time.Second, sig: syscall.SIGTERM,
			ticks: []tick{
				// SIGKILL is due at safe-until (13), before fence's own
				// signal time (13.05), which still comes.
				{now: at(12.95), wake: at(13)},
				{now: at(13), kill: true, wake: at(13.05)},
				{now: at(13.05), signal: true, kill: true, wake: at(13.1)},
			}},
		{name: "SIGKILL", begin: at(10), leaseStop: at(10), grace: 3 * time.Second, sig: syscall.SIGKILL,
			ticks: []tick{
				{now: at(10), wake: at(10.1)},
				{now: at(10.1), kill: true, wake: at(10.15)}, // no stop signal of its own: SIGKILL is it
				{now: at(10.12), wake: at(10.15)},
				{now: at(10.15), kill: true, wake: at(10.2)},
			}},
	} {
		o := beginOwnStop(c.begin, c.leaseStop, c.grace, c.sig)
		ph := phaseStopping
		for i, k := range c.ticks {
			signal, kill := o.due(k.now, k.wdStopped)
			if kill {
				ph = ph.next(stepKill)
			}
			if signal != k.signal || kill != k.kill {
				t.Errorf("%s, tick %d at %v: signal %v, kill %v; want %v, %v", c.name, i, k.now, signal, kill, k.signal, k.kill)
			}
			if wake := nextWake(o.schedule(ph), k.now); wake != k.wake {
				t.Errorf("%s, tick %d at %v (%v): wakes at %v, want %v", c.name, i, k.now, ph, wake, k.wake)
			}
		}
	}
}
