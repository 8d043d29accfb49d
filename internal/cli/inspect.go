package cli

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/fence-dev/fence/internal/contention"
	"github.com/fence-dev/fence/internal/exitcode"
	"github.com/fence-dev/fence/internal/output"
	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/history"
)

// lockCmd is cmd, a command of one LOCK (checked by lockArg, completed
// with the coordinator's locks), that runs fn with the coordinator open.
// check (nil: none) refuses bad input before the coordinator is opened.
func lockCmd(f *Factory, cmd *cobra.Command, check func() error, fn func(ctx context.Context, c history.Recorder, lock string) error) *cobra.Command {
	cmd.Args, cmd.ValidArgsFunction = lockArg, completeLocks(f)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if check != nil {
			if err := check(); err != nil {
				return err
			}
		}
		return f.withCoordinator(cmd.Context(), func(c history.Recorder) error { return fn(cmd.Context(), c, args[0]) })
	}
	return cmd
}

func newCmdCheck(f *Factory) *cobra.Command {
	var arg string
	var token uint64
	cmd := lockCmd(f, &cobra.Command{
		Use:   "check LOCK --token N",
		Short: "Tell whether N is the token of the live holder",
		Long: `Exit 0 when N is the fencing token of LOCK's live holder (of any of its
holders, for a semaphore taken with --slots), else 1 with the reason on stderr.
Prints nothing on success.

The answer may be out of date as soon as it is given: storage that must refuse
stale writers compares tokens itself (see 'fence guard').`,
		Example: `  fence check nightly-backup --token "$FENCE_TOKEN" || exit`,
	}, func() (err error) {
		if token, err = ParseToken(arg); err != nil {
			return fmt.Errorf("%w: %v", coord.ErrInvalid, err)
		}
		return nil
	}, func(ctx context.Context, c history.Recorder, lock string) error {
		info, err := inspect(ctx, c, "check", lock)
		if err != nil {
			return err
		}
		live := slices.ContainsFunc(info.AllHolders(), func(h coord.HolderInfo) bool { return h.Token == token }) // any holder of a semaphore
		switch {
		case !info.Held:
			return exitcode.New(exitcode.No, fmt.Errorf("%s is free: token %d is not live", output.Clean(lock), token))
		case !live && len(info.Holders) > 1:
			return exitcode.New(exitcode.No, fmt.Errorf("%s is held with tokens %s, not %d", output.Clean(lock), tokensOf(info), token))
		case !live:
			return exitcode.New(exitcode.No, fmt.Errorf("%s is held with token %d, not %d", output.Clean(lock), info.Token, token))
		}
		return nil
	})
	cmd.Flags().StringVar(&arg, "token", "", "fencing token (required)")
	_ = cmd.MarkFlagRequired("token")
	return cmd
}

func newCmdStatus(f *Factory) *cobra.Command {
	var format output.Format
	cmd := lockCmd(f, &cobra.Command{
		Use:   "status LOCK [-o text|json]",
		Short: "Show a lock's holder, token and TTL left; exit 1 when free",
		Long: `Show LOCK's state: holder, token, lease id, TTL and time left, how long it has
been held and how many wait for it. Exits 0 when the lock is held and 1 when it
is free (the state is printed either way).`,
	}, nil, func(ctx context.Context, c history.Recorder, lock string) error {
		info, err := inspect(ctx, c, "status", lock)
		if err != nil {
			return err
		}
		now, warning := f.Now(), f.coordinatorWarning()
		v := newLockView(info, now)
		v.CoordinatorWarning = warning
		err = f.write(format, v, func(w io.Writer) error {
			return output.WriteFields(w, withWarning(lockFields(info, now), warning))
		})
		if err == nil && !info.Held {
			return exitcode.Silent(exitcode.No)
		}
		return err
	})
	formatFlag(cmd, &format, output.Text, output.JSON)
	return cmd
}

func newCmdShow(f *Factory) *cobra.Command {
	var format output.Format
	var events int
	cmd := lockCmd(f, &cobra.Command{
		Use:   "show LOCK [-o text|json]",
		Short: "Show a lock's status and its recent events",
		Long: `Show LOCK's status (as 'fence status'), who waits for it (first served
first: holder, how long and since when, lease or process), its last completions of
'fence run --once' (newest first, at most 5; all with 'fence once list'), and its
recent events (acquired, released, renewal failures, leases lost, deadlines,
expiries, revocations, refused stale writes, completed and skipped --once runs,
freezes, limits and thaws), oldest first, where the coordinator keeps them.
Above the events, their waits (how long each holder waited for the lock) and
holds (how long it held it) side by side: count, median, max, total and a
sparkline of the recent ones on one scale; when waits exceed holds, the lock is
the bottleneck. Exits 0 whether the lock is held or free.`,
	}, func() error {
		if events < 0 {
			return usageErrorf("--events must not be negative, got %d", events)
		}
		return nil
	}, func(ctx context.Context, c history.Recorder, lock string) error {
		return runShow(ctx, f, c, lock, format, events)
	})
	formatFlag(cmd, &format, output.Text, output.JSON)
	cmd.Flags().IntVar(&events, "events", 20, "how many recent events to show (0: all that are kept)")
	return cmd
}

// runShow reads the lock's state, its events and its last completions,
// and prints them.
func runShow(ctx context.Context, f *Factory, c history.Recorder, lock string, format output.Format, n int) error {
	info, err := inspect(ctx, c, "show", lock)
	if err != nil {
		return err
	}
	events, err := c.History(ctx, lock, n)
	if err != nil {
		return fmt.Errorf("show %s: history: %w", output.Clean(lock), err)
	}
	done, err := c.Completions(ctx, lock)
	if err != nil {
		return fmt.Errorf("show %s: completion records: %w", output.Clean(lock), err)
	}
	// The last 5 finished, newest first.
	slices.SortFunc(done, func(a, b coord.Completion) int { return b.Finished.Compare(a.Finished) })
	done = done[:min(5, len(done))]
	now, warning, sum := f.Now(), f.coordinatorWarning(), contention.Of(events)
	v := showView{Lock: newLockView(info, now), Completions: viewsOf(done, newCompletionView),
		Contention: newContention(sum), Events: viewsOf(events, newEventView)}
	v.Lock.CoordinatorWarning = warning
	tty := f.IO.IsStdoutTTY()
	return f.write(format, v, func(out io.Writer) error {
		if err := output.WriteFields(out, withWarning(lockFields(info, now), warning)); err != nil {
			return err
		}
		if len(info.Queue) > 0 {
			fmt.Fprintln(out, "\nqueue (served in this order):")
			header, rows := queueTable(info.Queue, now)
			if err := output.WriteTable(out, tty, header, rows); err != nil {
				return err
			}
		}
		if len(done) > 0 {
			fmt.Fprintln(out, "\nlast completions:")
			if err := output.WriteTable(out, tty, onceHeader, viewsOf(done, completionRow)); err != nil {
				return err
			}
		}
		if len(events) == 0 {
			_, err := fmt.Fprintln(out, "\nevents: none")
			return err
		}
		if lines := contentionLines(sum); len(lines) > 0 {
			fmt.Fprintln(out, "\nwait and hold (the events below):")
			fmt.Fprintln(out, strings.Join(lines, "\n"))
		}
		fmt.Fprintln(out, "\nevents:")
		return output.WriteTable(out, tty, eventHeader, viewsOf(events, eventRow))
	})
}

// inspect is c.Inspect of lock, with its name (a lock not used yet has
// none); an error names the command and the lock.
func inspect(ctx context.Context, c coord.Coordinator, cmdName, lock string) (coord.LockInfo, error) {
	info, err := c.Inspect(ctx, lock)
	if err != nil {
		return info, fmt.Errorf("%s %s: %w", cmdName, output.Clean(lock), err)
	}
	info.Name = cmp.Or(info.Name, lock)
	return info, nil
}

// withWarning adds the coordinator's known problem (coordinatorWarning) to
// a lock's fields, when there is one.
func withWarning(fs []output.Field, warning string) []output.Field {
	if warning == "" {
		return fs
	}
	return append(fs, output.Field{Key: "coordinator_warning", Value: warning})
}

// tokensOf lists the tokens of a lock's holders: "5, 6, 9".
func tokensOf(i coord.LockInfo) string {
	return strings.Join(viewsOf(i.AllHolders(), func(h coord.HolderInfo) string { return strconv.FormatUint(h.Token, 10) }), ", ")
}
