package supervise

import (
	"os"
	"syscall"
)

// WatchdogPID is the process ID of the watchdog.
func (rr *Runner) WatchdogPID() int { return rr.r.wd.Process.Pid }

// The test binary is also the tests' watchdog: these variables of its
// environment inject the watchdog's faults (a SIGSTOP of itself).
func init() {
	freeze := func() { _ = syscall.Kill(os.Getpid(), syscall.SIGSTOP) }
	if os.Getenv("FENCE_TEST_WATCHDOG_FREEZE_BEFORE_REPORT") != "" {
		freezeBeforeReport = freeze
	}
	if os.Getenv("FENCE_TEST_WATCHDOG_FREEZE_AFTER_LOOK") != "" {
		freezeAfterLook = freeze
	}
}
