package cli

import (
	"github.com/spf13/cobra"

	"github.com/fence-dev/fence/internal/config"
)

// commandFactories are commands that register themselves from other files of
// this package (registerCommand in an init function), so that NewRootCmd,
// the completions and the generated docs pick them up.
var commandFactories []func(*Factory) *cobra.Command

// registerCommand adds a top-level command to every root built by
// NewRootCmd. Call it from an init function.
func registerCommand(fn func(*Factory) *cobra.Command) {
	commandFactories = append(commandFactories, fn)
}

// NewRootCmd builds the fence command tree on f. It also points f's
// configuration at the root's global flags.
func NewRootCmd(f *Factory) *cobra.Command {
	root := &cobra.Command{
		Use:   "fence",
		Short: "Safe work under distributed locks: leases with fencing tokens",
		Long: `fence takes a lease on a named lock from a coordinator, keeps it alive, runs a
command as the lease holder and hands it a fencing token: a number strictly
larger for every new holder, so that protected storage can refuse a stale
holder's writes.

The coordinator is local (one host, state in --state-dir) unless --endpoints
names an etcd cluster. Every global flag can also be set in the environment
(FENCE_ and the flag name in upper case, '-' as '_') or in the config file.

Exit codes: 0 success, 1 the answer is no (check, status), 75 busy, 76 lease
lost, 77 stale token, 124 deadline reached, 125 fence failed (usage,
configuration, bad input, coordinator unreachable), 126/127 the command could
not be run; run exits with its command's code.`,
		SilenceErrors:     true,
		SilenceUsage:      true,
		DisableAutoGenTag: true,
		Args:              noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return cmd.Help()
		},
	}
	root.SetIn(f.IO.In)
	root.SetOut(f.IO.Out)
	root.SetErr(f.IO.ErrOut)
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return usageErrorf("%s (see '%s --help')", err, c.CommandPath())
	})
	config.AddFlags(root.PersistentFlags())
	f.flags = root.PersistentFlags()

	root.AddGroup(
		&cobra.Group{ID: "lease", Title: "Leases:"},
		&cobra.Group{ID: "inspect", Title: "Inspection:"},
	)
	for _, c := range []*cobra.Command{
		newCmdAcquire(f), newCmdRenew(f), newCmdRelease(f), newCmdRevoke(f),
	} {
		c.GroupID = "lease"
		root.AddCommand(c)
	}
	for _, c := range []*cobra.Command{
		newCmdCheck(f), newCmdStatus(f), newCmdList(f), newCmdShow(f),
	} {
		c.GroupID = "inspect"
		root.AddCommand(c)
	}
	root.AddCommand(newCmdConfig(f), newCmdVersion(f))
	for _, fn := range commandFactories {
		root.AddCommand(fn(f))
	}
	root.InitDefaultCompletionCmd()
	root.InitDefaultHelpCmd()
	for _, c := range root.Commands() {
		if c.Name() == "completion" {
			// Runnable, so that "fence completion tcsh" is an error, not help.
			c.Args = noArgs
			c.RunE = func(cmd *cobra.Command, args []string) error { return cmd.Help() }
		}
	}
	return root
}
