// Package benchtrace writes the phase stamps of a `fence run` for the
// benchmark harness (bench/run): when FENCE_BENCH_TRACE names a file, fence
// and its watchdog append one line per phase to it,
//
//	<phase> <CLOCK_BOOTTIME ns> <pid>
//
// with one write(2) each on a file opened with O_APPEND, the format of
// bench/cmd/stamp's lines. Without the variable a Mark is one load and a
// comparison: nothing is opened, formatted or written on the normal path.
//
// The variable is read once, when the package is initialised, so that a
// command that changes its environment cannot move the trace.
package benchtrace

import (
	"os"
	"strconv"

	"github.com/fence-dev/fence/pkg/clock"
)

// Env is the environment variable that names the trace file.
const Env = "FENCE_BENCH_TRACE"

var path = os.Getenv(Env)

// Phases that fence and its watchdog mark, in the order of a run.
const (
	Main          = "main"           // fence: main entered (package init done)
	WatchdogStart = "watchdog_start" // fence: the watchdog process was forked
	WatchdogMain  = "watchdog_main"  // watchdog: main entered (its package init done)
	WatchdogReady = "watchdog_ready" // watchdog: subreaper, cgroup found: waiting for the start order
	Open          = "open"           // fence: the coordinator is open
	Acquired      = "acquired"       // fence: the lease is granted
	CommandStart  = "command_start"  // watchdog: the command was forked
	CommandEnd    = "command_end"    // fence: the watchdog reported the command's tree gone
	Released      = "released"       // fence: the release returned
	Exit          = "exit"           // fence: about to exit

	// Versions is not a phase of a run's way to its command: fence marks it
	// when every etcd member has answered the question of its version, or
	// the question's bound passed (not when the command's end cut it
	// short). Nothing waits for it but fence config and the dashboard; the
	// cluster tests check that.
	Versions = "versions"
)

// On reports whether a trace is being written.
func On() bool { return path != "" }

// Mark appends phase, the boot clock's reading and the PID to the trace.
// Errors are ignored: a trace never changes what fence does.
func Mark(phase string) {
	if path == "" {
		return
	}
	t := clock.Now()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return
	}
	_, _ = f.WriteString(phase + " " + strconv.FormatInt(int64(t), 10) + " " + strconv.Itoa(os.Getpid()) + "\n")
	_ = f.Close()
}
