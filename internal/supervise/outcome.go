package supervise

import (
	"errors"
	"fmt"
	"syscall"

	"github.com/fence-dev/fence/internal/clock"
	"github.com/fence-dev/fence/internal/exitcode"
)

// ending is how a run ended, as far as fence's exit code and message go:
// what the watchdog reported and what fence found.
type ending struct {
	execErr *report   // the command could not be started
	exit    *exitInfo // how the command ended; nil: the watchdog said nothing
	wdErr   string    // the watchdog's error report
	wdState string    // how the watchdog process ended (its ProcessState)
	// stopping is fence's stop reason ("" when fence started none).
	stopping string
	// lostErr is what fence knows of a lost or unsafe lease; cancelErr why
	// Run's context ended.
	lostErr, cancelErr error
	// safeUntil is the hold's last safe-until (0: no hold); token the
	// lease's token. unrenewed, when set, names the lock whose lease was
	// not renewed in time (of a set: the one that would expire first), and
	// token is then its token.
	safeUntil clock.Boot
	token     uint64
	unrenewed string
}

// result is fence's exit code and message for an ending, what the metrics
// say of it, and the line Verbose adds when there is no message.
type result struct {
	code     int
	err      error
	lost     bool // fence_lease_lost
	deadline bool // fence_deadline_exceeded
	verbose  string
}

// outcomeOf maps how a run ended to fence's exit code and message: the
// exit-code table of `fence run`.
func outcomeOf(p *plan, e ending) result {
	switch {
	case e.execErr != nil:
		return result{code: e.execErr.Code, err: errors.New(e.execErr.Msg)}
	case e.exit == nil && e.wdErr != "":
		return result{code: exitcode.Failure, err: fmt.Errorf("watchdog: %s", e.wdErr)}
	case e.exit == nil:
		return result{code: exitcode.Failure, err: fmt.Errorf("the watchdog process ended unexpectedly (%s)", e.wdState)}
	}
	x := e.exit
	reason := x.Stopped
	if reason == "" && x.Signal != 0 && e.stopping != "" {
		reason = e.stopping // fence's own stop got there first
	}
	switch reason {
	case "":
		if e.lostErr != nil && e.safeUntil != 0 && x.Died > e.safeUntil {
			// The command ended on its own, or killed by someone else, after
			// the lease could no longer be trusted: fence and its watchdog
			// were frozen past safe-until, so neither stopped it in time (on
			// the local backend the next holder kills an expired holder's
			// group). Its work was not covered by the lease to the end.
			return result{code: exitcode.LeaseLost, lost: true, err: fmt.Errorf("%v: the command %s after that", e.lostErr, endText(x))}
		}
		if x.Signal != 0 {
			return result{code: 128 + x.Signal, verbose: "the command was killed by SIG" + SignalName(syscall.Signal(x.Signal))}
		}
		return result{code: x.Code, verbose: fmt.Sprintf("the command exited with code %d", x.Code)}
	case reasonCanceled:
		return result{code: exitcode.Failure, err: fmt.Errorf("%w: the command was stopped (%s)", e.cancelErr, stopText(p, x))}
	case reasonDeadline:
		return result{code: exitcode.Deadline, deadline: true,
			err: fmt.Errorf("deadline %s reached: the command was stopped (%s)", deadlineText(p), stopText(p, x))}
	}
	if e.lostErr != nil {
		return result{code: exitcode.LeaseLost, lost: true, err: fmt.Errorf("%v: the command was stopped (%s)", e.lostErr, stopText(p, x))}
	}
	lock := p.Lock
	if e.unrenewed != "" {
		lock = e.unrenewed
	}
	return result{code: exitcode.LeaseLost, lost: true,
		err: fmt.Errorf("lease on %q (token %d) was not renewed in time: the command was stopped before it could expire (%s)",
			lock, e.token, stopText(p, x))}
}
