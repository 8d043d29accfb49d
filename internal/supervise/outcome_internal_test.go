package supervise

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/fence-dev/fence/internal/exitcode"
)

// TestOutcome: the exit-code table of `fence run`, row by row: fence's code,
// its message, and what the metrics record.
func TestOutcome(t *testing.T) {
	term := &plan{Options: Options{Lock: "l", Deadline: 2 * time.Second}, grace: 3 * time.Second, signal: syscall.SIGTERM}
	noRenew := &plan{Options: Options{Lock: "l", NoRenew: true}, grace: 3 * time.Second, signal: syscall.SIGTERM}
	kill := &plan{Options: Options{Lock: "l"}, grace: 3 * time.Second, signal: syscall.SIGKILL}
	lost := errors.New(`lease on "l" (token 7) was lost on the coordinator`)
	safe := at(10)
	for _, c := range []struct {
		name     string
		p        *plan
		e        ending
		code     int
		msg      string // "" for no error
		lost     bool
		deadline bool
		verbose  string
	}{
		{name: "not found", e: ending{execErr: &report{Code: 127, Msg: "nosuch: no such file or directory"}},
			code: 127, msg: "nosuch: no such file or directory"},
		{name: "cannot execute", e: ending{execErr: &report{Code: 126, Msg: "./x: permission denied"}},
			code: 126, msg: "./x: permission denied"},
		{name: "watchdog failed", e: ending{wdErr: "become a child subreaper: EPERM", wdState: "exit status 125"},
			code: exitcode.Failure, msg: "watchdog: become a child subreaper: EPERM"},
		{name: "watchdog died", e: ending{wdState: "signal: killed"},
			code: exitcode.Failure, msg: "the watchdog process ended unexpectedly (signal: killed)"},
		{name: "success", e: ending{exit: &exitInfo{Code: 0}}, code: 0, verbose: "the command exited with code 0"},
		{name: "its own code", e: ending{exit: &exitInfo{Code: 3}}, code: 3, verbose: "the command exited with code 3"},
		{name: "killed by someone", e: ending{exit: &exitInfo{Code: -1, Signal: 9}},
			code: 137, verbose: "the command was killed by SIGKILL"},
		{name: "a forwarded TERM", e: ending{exit: &exitInfo{Code: -1, Signal: 15}},
			code: 143, verbose: "the command was killed by SIGTERM"},
		{name: "exited as fence began to stop it", e: ending{stopping: reasonDeadline, exit: &exitInfo{Code: 0}},
			code: 0, verbose: "the command exited with code 0"},
		{name: "fence's own stop first", e: ending{stopping: reasonDeadline, exit: &exitInfo{Code: -1, Signal: 15}},
			code: exitcode.Deadline, deadline: true, msg: "deadline 2s reached: the command was stopped (SIGTERM)"},
		{name: "deadline", e: ending{stopping: reasonDeadline, exit: &exitInfo{Code: -1, Signal: 15, Stopped: reasonDeadline}},
			code: exitcode.Deadline, deadline: true, msg: "deadline 2s reached: the command was stopped (SIGTERM)"},
		{name: "deadline, SIGKILL needed", e: ending{exit: &exitInfo{Code: -1, Signal: 9, Stopped: reasonDeadline, Killed: true}},
			code: exitcode.Deadline, deadline: true, msg: "deadline 2s reached: the command was stopped (SIGTERM, then SIGKILL after 3s)"},
		{name: "the deadline of a fixed lease", p: noRenew, e: ending{exit: &exitInfo{Code: 0, Stopped: reasonDeadline}},
			code: exitcode.Deadline, deadline: true, msg: "deadline of the --no-renew lease reached: the command was stopped (SIGTERM)"},
		{name: "--signal KILL", p: kill, e: ending{exit: &exitInfo{Code: -1, Signal: 9, Stopped: reasonLease, Killed: true}, token: 7},
			code: exitcode.LeaseLost, lost: true,
			msg: `lease on "l" (token 7) was not renewed in time: the command was stopped before it could expire (SIGKILL)`},
		{name: "cancelled", e: ending{cancelErr: context.Canceled, exit: &exitInfo{Code: 143, Stopped: reasonCanceled}},
			code: exitcode.Failure, msg: "context canceled: the command was stopped (SIGTERM)"},
		{name: "not renewed", e: ending{exit: &exitInfo{Code: -1, Signal: 15, Stopped: reasonLease}, token: 7},
			code: exitcode.LeaseLost, lost: true,
			msg: `lease on "l" (token 7) was not renewed in time: the command was stopped before it could expire (SIGTERM)`},
		{name: "lost", e: ending{lostErr: lost, exit: &exitInfo{Code: -1, Signal: 15, Stopped: reasonLost}},
			code: exitcode.LeaseLost, lost: true, msg: `lease on "l" (token 7) was lost on the coordinator: the command was stopped (SIGTERM)`},
		{name: "fence gone", e: ending{exit: &exitInfo{Code: -1, Signal: 15, Stopped: reasonFenceGone}, token: 7},
			code: exitcode.LeaseLost, lost: true,
			msg: `lease on "l" (token 7) was not renewed in time: the command was stopped before it could expire (SIGTERM)`},
		{name: "ended after safe-until", e: ending{lostErr: lost, safeUntil: safe, exit: &exitInfo{Code: 0, Died: at(11)}},
			code: exitcode.LeaseLost, lost: true, msg: `lease on "l" (token 7) was lost on the coordinator: the command exited with code 0 after that`},
		{name: "killed after safe-until", e: ending{lostErr: lost, safeUntil: safe, exit: &exitInfo{Code: -1, Signal: 9, Died: at(11)}},
			code: exitcode.LeaseLost, lost: true, msg: `lease on "l" (token 7) was lost on the coordinator: the command was killed by SIGKILL after that`},
		{name: "ended at safe-until", e: ending{lostErr: lost, safeUntil: safe, exit: &exitInfo{Code: 4, Died: safe}},
			code: 4, verbose: "the command exited with code 4"},
		{name: "ended, no hold", e: ending{lostErr: lost, exit: &exitInfo{Code: 4, Died: at(11)}},
			code: 4, verbose: "the command exited with code 4"},
	} {
		p := c.p
		if p == nil {
			p = term
		}
		r := outcomeOf(p, c.e)
		msg := ""
		if r.err != nil {
			msg = r.err.Error()
		}
		if r.code != c.code || msg != c.msg || r.lost != c.lost || r.deadline != c.deadline || r.verbose != c.verbose {
			t.Errorf("%s: code %d, %q, lost %v, deadline %v, verbose %q\n\twant %d, %q, lost %v, deadline %v, verbose %q",
				c.name, r.code, msg, r.lost, r.deadline, r.verbose, c.code, c.msg, c.lost, c.deadline, c.verbose)
		}
		if c.e.cancelErr != nil && !errors.Is(r.err, c.e.cancelErr) {
			t.Errorf("%s: %v does not wrap %v", c.name, r.err, c.e.cancelErr)
		}
	}
}
