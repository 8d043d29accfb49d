package supervise

import (
	"context"
	"os"
	"syscall"

	"github.com/fence-dev/fence/internal/exitcode"
	"github.com/fence-dev/fence/pkg/coord"
)

// Run is Start followed by Runner.Run, for the tests (fence itself starts
// the Runner before it opens the coordinator).
func Run(ctx context.Context, c coord.Coordinator, opts Options) (int, error) {
	r, err := Start(opts)
	if err != nil {
		return exitcode.Failure, err
	}
	defer r.Close()
	return r.Run(ctx, c)
}

// WatchdogPID is the process ID of the watchdog.
func (r *Runner) WatchdogPID() int { return r.wd.Process.Pid }

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
