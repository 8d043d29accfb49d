package supervise

import (
	"context"

	"github.com/fence-dev/fence/internal/exitcode"
	"github.com/fence-dev/fence/pkg/coord"
)

// Run is Start followed by Runner.Run, for the tests.
func Run(ctx context.Context, c coord.Coordinator, opts Options) (int, error) {
	r, err := Start(opts)
	if err != nil {
		return exitcode.Failure, err
	}
	defer r.Close()
	return r.Run(ctx, c)
}

// WatchdogPID is the process ID of the watchdog.
func (rr *Runner) WatchdogPID() int { return rr.r.wd.Process.Pid }
