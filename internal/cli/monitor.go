package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/fence-dev/fence/internal/exitcode"
	"github.com/fence-dev/fence/internal/release"
	"github.com/fence-dev/fence/pkg/coord"
)

// The dashboard (fence top) and the Prometheus exporter (fence exporter) are
// the two long-running programs among fence's commands, and the only users
// of Bubble Tea and client_golang. A binary that links them pays their
// package initialisation at every start and pages in more of itself (see
// docs/benchmarks.md). So the fence binary leaves them out: these two
// commands run MonitorBinary, installed beside fence, which is fence with
// them linked in (cmd/fence-monitor, internal/monitor). Every other command,
// `fence run` first of all, starts without them.

// MonitorBinary is the binary that runs fence top and fence exporter,
// looked for in the directory of the running fence.
const MonitorBinary = "fence-monitor"

// monitorOfEnv carries the identity of the fence that runs MonitorBinary
// (buildID), so that a fence-monitor of another build refuses to stand in
// for it.
const monitorOfEnv = "FENCE_MONITOR_OF"

// Monitor is what fence top and fence exporter run. The fence binary has
// the zero Monitor: the two commands run MonitorBinary instead, with the
// same arguments.
type Monitor struct {
	// Dashboard runs fence top's dashboard on c until it ends.
	Dashboard func(ctx context.Context, c coord.Coordinator, o DashboardOptions) error
	// Exporter serves /metrics on listen until ctx ends.
	Exporter func(ctx context.Context, listen string, c coord.Coordinator, o ExporterOptions) error
}

// DashboardOptions are fence top's, for Monitor.Dashboard.
type DashboardOptions struct {
	Prefix   string
	Refresh  time.Duration
	Warning  string // the etcd servers' known bugs, for the status line
	Operator string // who the dashboard's revocations and limits name
	Input    io.Reader
	Output   io.Writer
}

// ExporterOptions are fence exporter's, for Monitor.Exporter.
type ExporterOptions struct {
	Prefix    string
	Logger    *slog.Logger
	OnListen  func(net.Addr)
	Retention time.Duration // a lock not listed this long is no longer exported
}

// buildID identifies this build of fence: its version and commit.
func buildID() string {
	v := buildInfo()
	return v.Version + " " + v.Commit
}

// runMonitor runs MonitorBinary in place of this process, with the same
// arguments, for the command name. It returns only on failure: the binary
// is not beside fence, or cannot be run.
func (f *Factory) runMonitor(name string) error {
	self, err := os.Executable()
	if err != nil {
		return exitcode.New(exitcode.Failure, fmt.Errorf("%s: find the fence binary: %w", name, err))
	}
	path := filepath.Join(filepath.Dir(self), MonitorBinary)
	missing := func(err error) error {
		return exitcode.New(exitcode.Failure, fmt.Errorf(
			"%s needs %s, installed beside fence: %w (the packages and archives carry it; from source: go build -tags %s -o %s ./cmd/fence-monitor)",
			name, MonitorBinary, err, release.Tags, path))
	}
	if _, err := os.Stat(path); err != nil {
		return missing(err)
	}
	if f.IO.In != os.Stdin || f.IO.Out != os.Stdout || f.IO.ErrOut != os.Stderr {
		// Not the process's own streams (a test, a program embedding the
		// command line): another program cannot take them over.
		return missing(errors.New("not on the process's own standard streams"))
	}
	env := append(os.Environ(), monitorOfEnv+"="+buildID())
	err = syscall.Exec(path, append([]string{path}, f.args...), env)
	return missing(err)
}

// checkMonitorOf refuses to run for a fence of another build: a
// fence-monitor left from another release would read the coordinator with
// other code than the fence beside it.
func checkMonitorOf() error {
	of, ok := os.LookupEnv(monitorOfEnv)
	if !ok {
		return nil
	}
	os.Unsetenv(monitorOfEnv)
	if id := buildID(); of != id {
		return exitcode.New(exitcode.Failure, fmt.Errorf(
			"%s is build %q, the fence that runs it %q: install both from the same release", MonitorBinary, id, of))
	}
	return nil
}
