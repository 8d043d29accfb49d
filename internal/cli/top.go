package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/spf13/cobra"

	"github.com/fence-dev/fence/internal/config"
	"github.com/fence-dev/fence/internal/exitcode"
	"github.com/fence-dev/fence/pkg/history"
	"github.com/fence-dev/fence/tui"
)

// topDialTimeout is fence top's dial timeout unless one is configured.
const topDialTimeout = 2 * time.Second

func newCmdTop(f *Factory) *cobra.Command {
	var refresh time.Duration
	cmd := &cobra.Command{
		Use:   "top [PREFIX] [--refresh D]",
		Short: "Live dashboard of holders, tokens, TTLs and renewal failures",
		Long: `Show the locks whose names start with PREFIX (all by default) in a live
dashboard: state (held, expiring, free, frozen, limit N), holder, fencing
token, TTL left, how long the lock has been held, renewals, renewal failures
and stale tokens refused. It follows the coordinator's watch (which reports
limits too) and lists every lock again each --refresh period. The status line
shows the coordinator, its health, the latency of the last read and the
totals (and how many locks are frozen or limited, where there is room). When
the coordinator stops answering (a read failed, or none was answered while
one has been on its way for a second; the dashboard reads one key every
second besides the lists, so a stall shows within 2s), it says for how long
and since when, and the TTLs show as '?': they
are not known until it answers again. An etcd server version with a known lease-safety bug is
marked there too, beside the health (▲, with its name when there is room;
the help screen names it in full).

Keys: enter opens a lock's details (its limit, who waits, waits beside holds
and its event timeline), / filters by name or holder, s cycles the sort (S
reverses it), r revokes the selected lease after asking (a fence run holding
it stops its command and exits 76), f freezes the selected lock and t thaws
it (removes the limit that binds it, a prefix's too), each after asking, ?
shows every key, q or ctrl-c quits. A frozen lock's state reads "frozen", a
limited one's "limit N"; a free lock's TOKEN is its last token, "(N)".

fence top needs a terminal (at least 40x8; 80x24 and up shows every column);
it refuses to start, exit 125, when stdout is not one: use 'fence list
--watch' there. NO_COLOR=1 draws without colour. SIGINT, SIGTERM and SIGHUP
end it like q.`,
		Example: `  fence top
  fence top deploy/
  FENCE_ENDPOINTS=etcd-1:2379 fence top --refresh 2s`,
		Args:              prefixArg,
		ValidArgsFunction: completeLocks(f),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runTop(cmd.Context(), f, strings.Join(args, ""), refresh)
		},
	}
	DurationVarP(cmd.Flags(), &refresh, "refresh", "", tui.DefaultRefresh, false, "list every lock again this often, besides following the watch")
	return cmd
}

func runTop(ctx context.Context, f *Factory, prefix string, refresh time.Duration) error {
	if !f.IO.IsStdoutTTY() {
		return exitcode.New(exitcode.Failure, errors.New("fence top needs a terminal; use fence list --watch"))
	}
	// Bubble Tea ends the program itself on SIGINT and SIGTERM and restores
	// the terminal. A second handler for them would race its own, and the
	// loser deadlocks Bubble Tea's shutdown (charmbracelet/bubbletea#1806).
	// SIGHUP, the terminal going away, is left to us: it ends the dashboard
	// through ctx, as q does.
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGHUP)
	defer stop()
	// The dashboard is interactive: an unreachable coordinator is reported
	// after a short wait, not the default dial timeout (an explicit
	// --dial-timeout is kept).
	if cfg, err := f.Config(); err == nil {
		cfg.ShortenDialTimeout(topDialTimeout)
	}
	// The keyboard: for the process's own stdin nil, so that Bubble Tea
	// reads the controlling terminal (/dev/tty) when stdin is redirected.
	in := f.IO.In
	if in == os.Stdin {
		in = nil
	}
	return f.withCoordinator(ctx, func(c history.Recorder) error {
		f.versions.await() // the status line shows their bugs: the whole answer
		err := tui.Run(ctx, c, tui.Options{
			Prefix:   prefix,
			Refresh:  refresh,
			Warning:  f.versions.short,
			Operator: config.DefaultSetter(),
			Input:    in,
			Output:   f.IO.Out,
		})
		if errors.Is(err, tea.ErrInterrupted) {
			// SIGINT from outside (on the raw terminal ctrl-c is a key):
			// the terminal is restored, as on q.
			return nil
		}
		if err != nil {
			return fmt.Errorf("top: %w", err)
		}
		return nil
	})
}
