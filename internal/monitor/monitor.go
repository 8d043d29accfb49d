// Package monitor links fence's two long-running programs, the dashboard
// (tui, Bubble Tea) and the Prometheus exporter (internal/exporter,
// client_golang), into the command line: Hooks is what cmd/fence-monitor
// gives cli.MainWith. The fence binary does not import this package, so that
// no other command pays their start-up (see internal/cli, monitor.go): its
// `fence top` and `fence exporter` run fence-monitor instead.
package monitor

import (
	"context"
	"errors"

	tea "github.com/charmbracelet/bubbletea"

	"github.com/fence-dev/fence/internal/cli"
	"github.com/fence-dev/fence/internal/exporter"
	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/tui"
)

// Hooks are the dashboard and the exporter, for cli.MainWith and
// cli.RunWith.
func Hooks() cli.Monitor {
	return cli.Monitor{Dashboard: dashboard, Exporter: serve}
}

func dashboard(ctx context.Context, c coord.Coordinator, o cli.DashboardOptions) error {
	err := tui.Run(ctx, c, tui.Options{
		Prefix:   o.Prefix,
		Refresh:  o.Refresh,
		Warning:  o.Warning,
		Operator: o.Operator,
		Input:    o.Input,
		Output:   o.Output,
	})
	if errors.Is(err, tea.ErrInterrupted) {
		// SIGINT from outside (on the raw terminal ctrl-c is a key): the
		// terminal is restored, as on q.
		return nil
	}
	return err
}

func serve(ctx context.Context, listen string, c coord.Coordinator, o cli.ExporterOptions) error {
	return exporter.Serve(ctx, listen, c, exporter.Options{Prefix: o.Prefix, Logger: o.Logger, OnListen: o.OnListen, Retention: o.Retention})
}
