package cli

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/fence-dev/fence/internal/config"
	"github.com/fence-dev/fence/internal/output"
	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/history"
)

// durationValue is a pflag.Value parsed strictly with config.ParseDuration:
// a unit is required; zero is accepted only when allowZero.
type durationValue struct {
	d         *time.Duration
	allowZero bool
}

func (v *durationValue) String() string {
	if v.d == nil || *v.d == 0 {
		return "" // no "(default 0s)" in the help
	}
	return v.d.String()
}

func (v *durationValue) Set(s string) error {
	parse := config.ParseDuration
	if v.allowZero {
		parse = config.ParseDurationOrZero
	}
	d, err := parse(s)
	if err != nil {
		return err
	}
	*v.d = d
	return nil
}

func (v *durationValue) Type() string { return "duration" }

// DurationVarP defines a strictly parsed duration flag: garbled, unit-less,
// negative and (unless allowZero) zero values are refused when the flag is
// parsed.
func DurationVarP(fs *pflag.FlagSet, p *time.Duration, name, short string, value time.Duration, allowZero bool, usage string) {
	*p = value
	fs.VarP(&durationValue{d: p, allowZero: allowZero}, name, short, usage)
}

// leaseWait is --ttl, --wait and -n/--no-wait, of run and acquire.
type leaseWait struct {
	ttl, wait time.Duration
	noWait    bool
}

func (o *leaseWait) addFlags(fs *pflag.FlagSet) {
	DurationVarP(fs, &o.ttl, "ttl", "", DefaultTTL, false, "time to live of the lease")
	DurationVarP(fs, &o.wait, "wait", "", 0, true, "give up after this long when the lock is held (default: wait until acquired; 0: don't wait)")
	fs.BoolVarP(&o.noWait, "no-wait", "n", false, "give up at once when the lock is held (= --wait 0)")
}

// waitFor is how long to wait for the lock: --wait, 0 with -n/--no-wait,
// else for ever.
func (o *leaseWait) waitFor(cmd *cobra.Command) (time.Duration, error) {
	switch {
	case o.noWait && cmd.Flags().Changed("wait"):
		return 0, usageErrorf("--wait and -n/--no-wait conflict: give one")
	case o.noWait:
		return 0, nil
	case cmd.Flags().Changed("wait"):
		return o.wait, nil
	}
	return coord.WaitForever, nil
}

// ParseToken parses a fencing token: a positive decimal integer of at most
// coord.MaxToken (2^63-1, the largest token a coordinator issues), nothing
// else.
func ParseToken(s string) (uint64, error) {
	if s == "" || strings.TrimLeft(s, "0123456789") != "" {
		return 0, fmt.Errorf("invalid token %q: want a positive integer", s)
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil || n > coord.MaxToken {
		return 0, fmt.Errorf("invalid token %q: out of range (tokens are at most %d)", s, uint64(coord.MaxToken))
	}
	if n == 0 {
		return 0, fmt.Errorf("invalid token %q: tokens start at 1", s)
	}
	return n, nil
}

// formatFlag adds -o/--output to cmd, with the allowed formats, the first
// being the default. Another value is refused when the flags are parsed.
func formatFlag(cmd *cobra.Command, p *output.Format, allowed ...output.Format) {
	names := viewsOf(allowed, func(f output.Format) string { return string(f) })
	*p = allowed[0]
	cmd.Flags().VarP(&formatValue{p, allowed}, "output", "o", "output format: "+strings.Join(names, ", "))
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions(names, cobra.ShellCompDirectiveNoFileComp))
}

// write prints v as -o json or yaml asks, else with text.
func (f *Factory) write(format output.Format, v any, text func(io.Writer) error) error {
	switch format {
	case output.JSON:
		return output.WriteJSON(f.IO.Out, v)
	case output.YAML:
		return output.WriteYAML(f.IO.Out, v)
	}
	return text(f.IO.Out)
}

// textLine is the text printer of one line.
func textLine(s string) func(io.Writer) error {
	return func(w io.Writer) error {
		_, err := fmt.Fprintln(w, s)
		return err
	}
}

// formatValue is the value of -o: one of allowed.
type formatValue struct {
	p       *output.Format
	allowed []output.Format
}

func (v *formatValue) String() string { return string(*v.p) }
func (v *formatValue) Type() string   { return "string" }

func (v *formatValue) Set(s string) error {
	f, err := output.ParseFormat(s, v.allowed...)
	if err == nil {
		*v.p = f
	}
	return err
}

// noArgs refuses positional arguments.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		if cmd.HasSubCommands() {
			return usageErrorf("unknown command %q for %q (see '%s --help')", args[0], cmd.CommandPath(), cmd.CommandPath())
		}
		return usageErrorf("%s takes no arguments, got %q", cmd.CommandPath(), args[0])
	}
	return nil
}

// lockArg requires exactly one LOCK argument and checks it.
func lockArg(cmd *cobra.Command, args []string) error {
	if len(args) > 1 {
		return usageErrorf("%s takes one LOCK argument, got %d (usage: %s)", cmd.CommandPath(), len(args), cmd.UseLine())
	}
	return locksArgs(cmd, args)
}

// prefixArg allows one PREFIX argument or none, and checks it: a prefix
// of some valid lock name. The command reads it as strings.Join(args, "").
func prefixArg(cmd *cobra.Command, args []string) error {
	switch {
	case len(args) > 1:
		return usageErrorf("%s takes at most 1 argument(s), got %d (usage: %s)", cmd.CommandPath(), len(args), cmd.UseLine())
	case len(args) == 0 || args[0] == "":
		return nil
	case len(args[0]) > coord.MaxNameLen:
		return fmt.Errorf("%w: prefix is %d bytes, longer than any lock name", coord.ErrInvalid, len(args[0]))
	}
	return coord.ValidateName(args[0])
}

// completionTimeout bounds completing a LOCK argument, connection
// included: a shell waiting on tab for an unreachable coordinator's dial
// timeout is worse than no candidates.
const completionTimeout = time.Second

// completeLocks completes a LOCK argument with the names of existing locks,
// or with none when the coordinator does not answer within
// completionTimeout.
func completeLocks(f *Factory) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		ctx, cancel := context.WithTimeout(cmd.Context(), completionTimeout)
		defer cancel()
		var names []string
		err := f.withCoordinator(ctx, func(c history.Recorder) error {
			infos, err := c.List(ctx, toComplete)
			for _, i := range infos {
				names = append(names, i.Name)
			}
			return err
		})
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp | cobra.ShellCompDirectiveError
		}
		return names, cobra.ShellCompDirectiveNoFileComp
	}
}
