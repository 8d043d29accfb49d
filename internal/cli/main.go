// Package cli is the fence command line: a cobra command tree whose commands
// are thin (an options struct, one call into pkg/coord, one printer), a
// Factory that makes them testable, and Main, the one place where an error
// becomes a message and an exit code.
package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"

	"github.com/fence-dev/fence/internal/exitcode"
	"github.com/fence-dev/fence/internal/sharedir"
	"github.com/fence-dev/fence/internal/supervise"
	"github.com/fence-dev/fence/pkg/coord"
)

// Main runs fence with args (without the program name) on the process's
// standard streams and returns the exit code.
func Main(args []string) int {
	// fence re-executes itself as the watchdog of `fence run`: dispatch it
	// before building the command tree, to start fast.
	if len(args) > 0 && args[0] == supervise.WatchdogArg {
		return supervise.WatchdogMain(args, endLeases)
	}
	return Run(context.Background(), args, System())
}

// Run runs fence with args on ios and returns the exit code. An error is
// printed as one line "fence: ..." on ErrOut; a panic becomes exit 125 with
// one line, never a stack trace (FENCE_DEBUG_PANIC=1 prints the stack).
// When fence fails and args ask for -o env, stdout gets "(exit N)", so that
// `eval "$(fence acquire ... -o env)"` fails with fence's exit code N
// instead of evaluating nothing and succeeding.
func Run(ctx context.Context, args []string, ios *IOStreams) (code int) {
	defer func() {
		if r := recover(); r != nil {
			fmt.Fprintf(ios.ErrOut, "fence: internal error: %s\n", oneLine(fmt.Sprint(r)))
			if os.Getenv("FENCE_DEBUG_PANIC") == "1" {
				ios.ErrOut.Write(debug.Stack())
			}
			code = exitcode.Failure
		}
		if code != exitcode.OK && requestsEnv(args) {
			// A subshell that exits with fence's exit code: eval then
			// fails with that code in every POSIX shell (sh, dash, bash,
			// ksh, zsh), which stops a script under set -e or '|| exit
			// $?'; being a subshell, it never exits an interactive shell,
			// and it assigns no variable.
			fmt.Fprintf(ios.Out, "(exit %d)\n", code)
		}
	}()
	f := NewFactory(ios)
	f.args = args
	root := NewRootCmd(f)
	root.SetArgs(args)
	cmd, err := root.ExecuteContextC(ctx)
	return report(f, err, lockAttrs(cmd)...)
}

// report prints err and returns its exit code: "fence: MSG", or under
// --log-format json an error record with the exit code and attrs (the
// command's lock: lockAttrs). A permission error of the local state tree
// gets what the file is and the command that repairs it
// (sharedir.Explain). Nothing is printed for a silent error, nor under
// -q/--quiet for an expected outcome of a wrapper (busy, already done,
// frozen: a lock whose limit keeps it from being taken is busy).
func report(f *Factory, err error, attrs ...any) int {
	if err == nil {
		return exitcode.OK
	}
	code := exitcode.Code(err)
	cfg, cerr := f.Config()
	if cerr == nil && cfg.Backend() == "local" {
		err = sharedir.Explain(cfg.LocalStateDir(), err)
	}
	quiet := cerr == nil && cfg.Quiet && (errors.Is(err, coord.ErrBusy) || errors.Is(err, coord.ErrCompleted))
	msg := oneLine(err.Error())
	switch {
	case exitcode.IsSilent(err) || quiet || msg == "":
	case cerr == nil && strings.EqualFold(strings.TrimSpace(cfg.LogFormat), "json"):
		f.logLine(slog.LevelError, msg, append([]any{"exit_code", code}, attrs...)...)
	default:
		fmt.Fprintf(f.IO.ErrOut, "fence: %s\n", msg)
	}
	return code
}

// lockAttrs are the log attributes naming what cmd works on, read from its
// usage line and its arguments: "lock" for a command of one LOCK (or of
// LOCK... given one), "locks" for several, "group" for a shard group; none
// for other commands.
func lockAttrs(cmd *cobra.Command) []any {
	if cmd == nil {
		return nil
	}
	use := strings.Fields(cmd.Use)
	args := cmd.Flags().Args()
	if n := cmd.ArgsLenAtDash(); n >= 0 && n <= len(args) {
		args = args[:n]
	}
	if len(use) < 2 || len(args) == 0 || cmd.Flags().Changed("under") {
		return nil // (limit --under P N: N is no lock)
	}
	switch {
	case use[1] == "LOCK" || use[1] == "LOCK..." && len(args) == 1:
		return []any{"lock", args[0]}
	case use[1] == "LOCK...":
		return []any{"locks", args}
	case use[1] == "GROUP":
		return []any{"group", args[0]}
	}
	return nil
}

// oneLine folds a message onto one line.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// usageErrorf is a usage error: a bad flag, argument or combination of
// them (exit 125).
func usageErrorf(format string, args ...any) error {
	return exitcode.New(exitcode.Failure, fmt.Errorf(format, args...))
}
