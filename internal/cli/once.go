package cli

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/fence-dev/fence/internal/exitcode"
	"github.com/fence-dev/fence/internal/output"
	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/history"
)

func newCmdOnce(f *Factory) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "once",
		Short: "The completion records of 'fence run --once': list, forget, mark",
		Long: `'fence run LOCK --once KEY' (or --once-per D) runs its command at most once to
success per (LOCK, KEY): the success is a completion record on the
coordinator, kept for --once-for (default 30 days), then dropped on its own.
These commands show and change those records: forget a key to let the job run
again, mark one to keep it from running.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error { return cmd.Help() },
	}
	cmd.AddCommand(newCmdOnceList(f), newCmdOnceForget(f), newCmdOnceMark(f))
	return cmd
}

// completionView is a completion record in JSON and YAML.
type completionView struct {
	Key             string  `json:"key" yaml:"key"`
	Holder          string  `json:"holder" yaml:"holder"`
	Token           uint64  `json:"token" yaml:"token"`
	Started         *string `json:"started" yaml:"started"`
	Finished        *string `json:"finished" yaml:"finished"`
	DurationSeconds float64 `json:"duration" yaml:"duration"`
	Expires         *string `json:"expires" yaml:"expires"`
}

func newCompletionView(c coord.Completion) completionView {
	return completionView{
		Key: c.Key, Holder: c.Holder, Token: c.Token,
		Started: output.Time(c.Started), Finished: output.Time(c.Finished),
		DurationSeconds: output.Seconds(jobDuration(c)), Expires: output.Time(c.Expires),
	}
}

var onceHeader = []string{"KEY", "HOLDER", "TOKEN", "FINISHED", "DURATION"}

func newCmdOnceList(f *Factory) *cobra.Command {
	var format output.Format
	cmd := lockCmd(f, &cobra.Command{
		Use:   "list LOCK [-o table|json|yaml]",
		Short: "List a lock's completion records: key, holder, token, finished, duration",
		Long: `List the completion records of LOCK, sorted by key. With -o json each record
has key, holder, token, started, finished, duration (seconds) and expires; a
record marked by hand has token 0.`,
		Example: `  fence once list billing -o json | jq -r '.[].key'`,
	}, nil, func(ctx context.Context, c history.Recorder, lock string) error {
		recs, err := c.Completions(ctx, lock)
		if err != nil {
			return err
		}
		return f.write(format, viewsOf(recs, newCompletionView), func(w io.Writer) error {
			if len(recs) == 0 && f.IO.IsStdoutTTY() {
				return textLine("no completion records")(w)
			}
			return output.WriteTable(w, f.IO.IsStdoutTTY(), onceHeader, viewsOf(recs, completionRow))
		})
	})
	formatFlag(cmd, &format, output.Table, output.JSON, output.YAML)
	return cmd
}

// jobDuration is how long the job of c ran (0 when unknown).
func jobDuration(c coord.Completion) time.Duration {
	if c.Started.IsZero() || c.Finished.Before(c.Started) {
		return 0
	}
	return c.Finished.Sub(c.Started)
}

func completionRow(r coord.Completion) []string {
	return []string{output.Clean(r.Key), output.Clean(cmp.Or(r.Holder, "-")), strconv.FormatUint(r.Token, 10), textTime(r.Finished), output.Duration(jobDuration(r))}
}

func newCmdOnceForget(f *Factory) *cobra.Command {
	return &cobra.Command{
		Use:   "forget LOCK KEY",
		Short: "Remove a completion record, so that the job runs again (exit 1 when there was none)",
		Args:  onceArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return f.withCoordinator(cmd.Context(), func(k history.Recorder) error {
				removed, err := k.Forget(cmd.Context(), args[0], args[1])
				if err != nil {
					return err
				}
				if !removed {
					return exitcode.New(exitcode.No, fmt.Errorf("no completion record of %s for key %s", output.Clean(args[0]), output.Clean(args[1])))
				}
				f.verbosef("forgot the completion of %q for key %q", args[0], args[1])
				return nil
			})
		},
	}
}

func newCmdOnceMark(f *Factory) *cobra.Command {
	var keep time.Duration
	cmd := &cobra.Command{
		Use:   "mark LOCK KEY [--once-for D]",
		Short: "Record a key as done by hand, so that 'fence run --once' skips it",
		Long: `Write a completion record for KEY of LOCK without running anything (token 0,
holder --holder), replacing any record of KEY: 'fence run LOCK --once KEY'
then runs nothing. It is kept for --once-for (default 30 days).`,
		Args: onceArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := coord.ValidateKeep(keep); err != nil {
				return err
			}
			holder, err := f.holder(coord.DefaultHolder)
			if err != nil {
				return err
			}
			now := f.Now()
			return f.withCoordinator(cmd.Context(), func(k history.Recorder) error {
				return k.Mark(cmd.Context(), coord.Completion{Lock: args[0], Key: args[1], Holder: holder, Started: now, Finished: now}, keep)
			})
		},
	}
	DurationVarP(cmd.Flags(), &keep, "once-for", "", coord.DefaultKeep, false, "how long the record is kept")
	return cmd
}

// onceArgs wants LOCK and KEY.
func onceArgs(cmd *cobra.Command, args []string) error {
	if len(args) != 2 {
		return usageErrorf("%s needs LOCK and KEY, got %d arguments", cmd.CommandPath(), len(args))
	}
	if err := coord.ValidateName(args[0]); err != nil {
		return err
	}
	return coord.ValidateKey(args[1])
}
