package cli

import (
	"slices"

	"github.com/spf13/cobra"

	"github.com/fence-dev/fence/internal/config"
)

type commandGroup struct {
	id, title string
	cmds      []func(*Factory) *cobra.Command
}

// commandGroups is every top-level command, in the groups and the order
// that `fence --help` shows them. A new command is added here (and nowhere
// else), so that the help, the completions and the generated docs see it.
var commandGroups = []commandGroup{
	{"run", "Running commands under a lock:", []func(*Factory) *cobra.Command{newCmdRun}},
	{"once", "Jobs that run once (fence run --once):", []func(*Factory) *cobra.Command{newCmdOnce}},
	{"lease", "Leases:", []func(*Factory) *cobra.Command{newCmdAcquire, newCmdRenew, newCmdRelease, newCmdRevoke}},
	{"inspect", "Inspection:", []func(*Factory) *cobra.Command{newCmdCheck, newCmdStatus, newCmdList, newCmdShow, newCmdHistory, newCmdTop}},
	{"limits", "The kill switch (limits on holders):", []func(*Factory) *cobra.Command{newCmdLimit, newCmdFreeze, newCmdThaw}},
	{"shards", "Ownership partitioning:", []func(*Factory) *cobra.Command{newCmdShards}},
	{"guard", "Fenced writes:", []func(*Factory) *cobra.Command{newCmdGuard}},
	{"tools", "Tools:", []func(*Factory) *cobra.Command{newCmdExporter, newCmdConfig, newCmdPostgres, newCmdVersion}},
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
names an etcd cluster or --postgres a PostgreSQL database. Every global flag
can also be set in the environment
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
		if c.Name() == "run" && c.HasParent() && c.Parent() == root && !slices.Contains(f.args, "--") {
			// fence run job1 ls -la: the command's own flag, without "--".
			lock := "LOCK"
			if a := c.Flags().Args(); len(a) > 0 {
				lock = a[0]
			}
			return usageErrorf("%s; run needs \"--\" before the command (so that its flags are not taken as fence's): fence run %s [flags] -- COMMAND [ARG...]", err, lock)
		}
		return usageErrorf("%s (see '%s --help')", err, c.CommandPath())
	})
	config.AddFlags(root.PersistentFlags())
	f.flags = root.PersistentFlags()

	for _, g := range commandGroups {
		root.AddGroup(&cobra.Group{ID: g.id, Title: g.title})
		for _, fn := range g.cmds {
			c := fn(f)
			c.GroupID = g.id
			root.AddCommand(c)
		}
	}
	root.SetCompletionCommandGroupID("tools")
	root.SetHelpCommandGroupID("tools")
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
