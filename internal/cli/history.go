package cli

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/fence-dev/fence/pkg/history"

	"github.com/spf13/cobra"

	"github.com/fence-dev/fence/internal/exporter"
	"github.com/fence-dev/fence/internal/output"
)

func newCmdHistory(f *Factory) *cobra.Command {
	var format output.Format
	var limit int
	cmd := lockCmd(f, &cobra.Command{
		Use:   "history LOCK [-o text|json] [--limit N]",
		Short: "Print a lock's recorded events, oldest first",
		Long: `Print the events the coordinator keeps for LOCK, oldest first: acquired (token,
holder, wait), released (held for), renewal failures, leases lost, deadlines
exceeded, expiries taken over, revocations and stale tokens refused by
'fence guard put' (recorded under its --lock, default $FENCE_LOCK). The
history is bounded: by default the last 1000 events of a lock, none older
than 7 days.

On a terminal the table is aligned and has a header; piped, each event is one
line of tab-separated fields (TIME, EVENT, HOLDER, TOKEN, DETAIL) with no
header. Times are UTC, as 2030-01-02T03:00:00Z.`,
	}, func() error {
		if limit < 0 {
			return usageErrorf("--limit must not be negative, got %d", limit)
		}
		return nil
	}, func(ctx context.Context, c history.Recorder, lock string) error {
		events, err := c.History(ctx, lock, limit)
		if err != nil {
			return fmt.Errorf("history %s: %w", output.Clean(lock), err)
		}
		return f.write(format, viewsOf(events, newEventView), func(w io.Writer) error {
			return output.WriteTable(w, f.IO.IsStdoutTTY(), eventHeader, viewsOf(events, eventRow))
		})
	})
	formatFlag(cmd, &format, output.Text, output.JSON)
	cmd.Flags().IntVar(&limit, "limit", 0, "print only the last N events (0: all that are kept)")
	return cmd
}

func newCmdExporter(f *Factory) *cobra.Command {
	var (
		listen    string
		retention time.Duration
	)
	cmd := &cobra.Command{
		Use:   "exporter --listen ADDR [PREFIX] [--retention D]",
		Short: "Serve Prometheus metrics of every lock on /metrics",
		Long: `Serve a Prometheus /metrics endpoint for the whole coordinator (or the locks
under PREFIX), fed by its watch: per lock, held (0/1), token, TTL remaining,
holder (an info metric), renewal failures, stale refusals, and a histogram of
critical-section durations; fence_coordinator_known_bug for an etcd server
version with a known lease-safety bug. A lock the coordinator has not listed
for --retention (on etcd: nobody holds, waits for or limits it) is no longer
exported, until it is used again. /healthz answers 200 when the coordinator
answered a read within the last second or answers one within 2s, else 503 with
the reason. Runs until SIGINT or SIGTERM. See docs/observability.md for the
metrics and example alerts.`,
		Example: `  fence exporter --listen 127.0.0.1:9477`,
		Args:    prefixArg,
		RunE: func(cmd *cobra.Command, args []string) error {
			prefix := strings.Join(args, "")
			logger, err := f.Logger()
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return f.withCoordinator(ctx, func(c history.Recorder) error {
				err := exporter.Serve(ctx, listen, c, exporter.Options{
					Prefix: prefix, Logger: logger, Retention: retention,
					OnListen: func(a net.Addr) { f.verbosef("serving metrics on http://%s/metrics", a) },
				})
				if ctx.Err() != nil && err == nil || err == context.Canceled {
					return nil
				}
				return err
			})
		},
	}
	cmd.Flags().StringVar(&listen, "listen", "127.0.0.1:9477", "address to serve /metrics on")
	DurationVarP(cmd.Flags(), &retention, "retention", "", time.Hour, false, "stop exporting a lock the coordinator has not listed for this long")
	return cmd
}
