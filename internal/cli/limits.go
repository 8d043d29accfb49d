package cli

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/fence-dev/fence/internal/config"
	"github.com/fence-dev/fence/internal/exitcode"
	"github.com/fence-dev/fence/internal/output"
	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/history"
)

// The kill switch: fence limit, fence freeze, fence thaw (coord.Coordinator.SetLimit).

type limitOptions struct {
	name     string // LOCK, or the prefix with --under
	prefix   string // --under
	isPrefix bool
	reason   string
	revoke   bool
	format   output.Format
}

// newLimitCmd is limit, freeze or thaw (cmd): LOCK or --under P, then
// more arguments (limit's N), read as usage says; setting adds --reason
// and --revoke. run gets the scope and the arguments after it.
func newLimitCmd(f *Factory, cmd *cobra.Command, usage string, more int, setting bool, run func(context.Context, *limitOptions, []string) error) *cobra.Command {
	o := &limitOptions{}
	cmd.ValidArgsFunction = completeLocks(f)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		o.isPrefix = cmd.Flags().Changed("under")
		want := more
		if !o.isPrefix {
			want++
		}
		switch {
		case len(args) != want && !o.isPrefix && len(args) == more && cmd.Flags().Changed("prefix"):
			return usageErrorf("usage: %s (--prefix is the etcd key prefix; for every lock whose name starts with P, use --under P)", usage)
		case len(args) != want:
			return usageErrorf("usage: %s", usage)
		case o.isPrefix:
			o.name = o.prefix
			if o.name != "" {
				if err := coord.ValidateLimit(coord.Limit{Name: o.name, Prefix: true}); err != nil {
					return err
				}
			}
		default:
			if err := coord.ValidateName(args[0]); err != nil {
				return err
			}
			o.name, args = args[0], args[1:]
		}
		return run(cmd.Context(), o, args)
	}
	cmd.Flags().StringVar(&o.prefix, "under", "", "every lock whose name starts with this prefix, also locks not used yet (\"\" for every lock), instead of LOCK")
	if setting {
		cmd.Flags().StringVar(&o.reason, "reason", "", "why, in words: shown to every caller it turns away, in status, list, show and the history")
		cmd.Flags().BoolVar(&o.revoke, "revoke", false, "also end the holders above the new limit, newest first, as 'fence revoke' does (ask their fence run to stop, then end the lease)")
	}
	formatFlag(cmd, &o.format, output.Text, output.JSON)
	return cmd
}

func newCmdLimit(f *Factory) *cobra.Command {
	return newLimitCmd(f, &cobra.Command{
		Use:   "limit LOCK N | --under P N [--reason TEXT] [--revoke]",
		Short: "Cap the holders of a lock (or of every lock under a prefix): the kill switch",
		Long: `Cap the holders of LOCK, or of every lock whose name starts with --under P
(also locks that do not exist yet), at N: an operator limit below the lock's
--slots. 'limit 1' is safe serial processing; 'limit 0' is 'fence freeze'.
Where several limits cover a lock (its own, prefixes), the smallest binds.

The limit persists (on the coordinator) until 'fence thaw'. It is checked with
every grant: once this command returns, no lock it covers gets a holder beyond
it. Holders above it run on unless --revoke is given (then they are ended,
newest first, as 'fence revoke --token' does); waiters keep their place
in the queue and proceed, in order, when the limit allows. A caller that does
not wait (-n) gets exit 75 with the reason and who set the limit. Limits show
in status, list, show, top, the history and the exporter's metrics.`,
		Example: `  fence limit nightly-backup 1 --reason "one at a time during the migration"
  fence limit --under backups/ 3`,
	}, "fence limit LOCK N | fence limit --under P N", 1, true, func(ctx context.Context, o *limitOptions, rest []string) error {
		n, err := strconv.Atoi(rest[0])
		if err != nil || n < 0 || n > coord.MaxLimit {
			return usageErrorf("limit N must be a whole number from 0 to %d, got %q", coord.MaxLimit, rest[0])
		}
		return runLimit(ctx, f, o, n)
	})
}

func newCmdFreeze(f *Factory) *cobra.Command {
	return newLimitCmd(f, &cobra.Command{
		Use:   "freeze LOCK | --under P [--reason TEXT] [--revoke]",
		Short: "Let no new holder take a lock (or any lock under a prefix) until thawed",
		Long: `Freeze LOCK, or every lock whose name starts with --under P (also locks that
do not exist yet): no new holder until 'fence thaw'. It is 'fence limit ... 0'.

Once this command returns, no lock it covers gets a new holder. The holders
run on unless --revoke is given (then each is asked to stop and release, as
'fence revoke' does); waiters keep their place in the queue and proceed in
order after the thaw. A caller that does not wait (-n) gets exit 75 with the
reason and who froze the lock. The freeze persists on the coordinator and shows
in status ("frozen"), list, show, top, the history and the metrics.`,
		Example: `  fence freeze --under backups/ --reason "INC-4711: storage degraded"
  fence freeze nightly-backup --revoke`,
	}, "fence freeze LOCK | fence freeze --under P", 0, true, func(ctx context.Context, o *limitOptions, _ []string) error {
		return runLimit(ctx, f, o, 0)
	})
}

func newCmdThaw(f *Factory) *cobra.Command {
	return newLimitCmd(f, &cobra.Command{
		Use:   "thaw LOCK | --under P",
		Short: "Remove the limit or freeze of a lock (or of a prefix)",
		Long: `Remove the limit or freeze set on LOCK, or on --under P, by 'fence limit' or
'fence freeze'. Its waiters proceed at once, in the order they queued. A limit
of another scope that covers the lock (a prefix's, or the lock's own after a
prefix thaw) stays in force: thaw says so. Exits 0, also when there was no
such limit.`,
		Example: `  fence thaw --under backups/
  fence thaw nightly-backup`,
	}, "fence thaw LOCK | fence thaw --under P", 0, false, func(ctx context.Context, o *limitOptions, _ []string) error {
		return runLimit(ctx, f, o, -1) // thaw
	})
}

// limitResult is what limit, freeze and thaw print with -o json.
type limitResult struct {
	Action string     `json:"action"` // "frozen", "limited", "thawed"
	Scope  string     `json:"scope"`  // "lock" or "prefix"
	Name   string     `json:"name"`
	Limit  *limitView `json:"limit"` // the limit set (null for thaw)
	// Removed is false for a thaw that found no limit of that scope.
	Removed *bool `json:"removed,omitempty"`
	// StillLimited are the locks under the scope that another limit still
	// holds back after a thaw (as of the command's listing).
	StillLimited []string `json:"still_limited,omitempty"`
	// Revoked are the locks whose holders --revoke ended.
	Revoked []string `json:"revoked,omitempty"`
}

// runLimit sets the limit n on o's scope (limit, freeze) or, with n < 0,
// removes it (thaw); records that in the history of every lock the scope
// covers; and prints what it did.
func runLimit(ctx context.Context, f *Factory, o *limitOptions, n int) error {
	thaw := n < 0
	l := coord.Limit{Name: o.name, Prefix: o.isPrefix, Max: n, Reason: o.reason, By: config.DefaultSetter()}
	scope := output.Clean(l.Scope())
	res := limitResult{Scope: scopeWord(l.Prefix), Name: l.Name}
	var what, text string // what: for errors
	var kind history.Kind
	res.Action, what, kind, text = limitWords(n, scope)
	if !thaw {
		if err := coord.ValidateLimit(l); err != nil {
			return err
		}
		res.Limit = newLimitView(&l)
		if l.Reason != "" {
			text += ": " + output.Clean(l.Reason)
		}
	}
	err := f.withCoordinator(ctx, func(c history.Recorder) error {
		changed, done := true, "set"
		if thaw {
			old, ok, err := c.ClearLimit(ctx, l.Name, l.Prefix)
			if err != nil {
				return fmt.Errorf("%s: %w", what, err)
			}
			// The thaw's event names the limit it removed.
			res.Removed, changed, done, l.Reason = &ok, ok, "removed", old.Describe()
		} else if err := c.SetLimit(ctx, l); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		infos, err := covered(ctx, c, l.Name, l.Prefix)
		if err != nil {
			return fmt.Errorf("%s: the limit is %s, but the locks it covers cannot be listed: %w", what, done, err)
		}
		if changed {
			recordLimit(ctx, c, infos, kind, l)
		}
		for _, i := range infos {
			if thaw && i.Limit != nil { // another scope's limit (or, for a lock, the one it has)
				res.StillLimited = append(res.StillLimited, i.Name)
			}
		}
		if o.revoke {
			res.Revoked, err = revokeAbove(ctx, f, c, infos, n, o.format)
			if err != nil {
				return fmt.Errorf("%s: the limit is set; %w", what, err)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	if thaw && !*res.Removed {
		text = scope + " had no limit of its own: nothing removed"
	}
	if err := f.write(o.format, res, textLine(text)); err != nil {
		return err
	}
	if len(res.StillLimited) > 0 && o.format != output.JSON {
		f.logLine(slog.LevelInfo, fmt.Sprintf("thaw: another limit still holds back %s (see 'fence status')", output.Clean(strings.Join(res.StillLimited, ", "))))
	}
	return nil
}

// limitWords name the change of a limit to n (thaw: n < 0) on scope: its
// JSON action, its name in errors, its history event and its text.
func limitWords(n int, scope string) (action, what string, kind history.Kind, text string) {
	switch {
	case n < 0:
		return "thawed", "thaw " + scope, history.Thawed, "thawed " + scope
	case n == 0:
		return "frozen", "freeze " + scope, history.Frozen, "froze " + scope
	}
	return "limited", "limit " + scope, history.Limited, fmt.Sprintf("limited %s to %d holder(s)", scope, n)
}

// revokeAbove revokes the holders of infos above the limit n, newest
// first (a lock has one holder, a semaphore up to its slots), each named
// by its token, and returns the locks whose holders it ended.
func revokeAbove(ctx context.Context, f *Factory, c coord.Coordinator, infos []coord.LockInfo, n int, format output.Format) ([]string, error) {
	var locks []string
	for _, i := range infos {
		hs := slices.Clone(i.AllHolders())
		slices.SortFunc(hs, func(a, b coord.HolderInfo) int { return cmp.Compare(b.Token, a.Token) })
		revoked := false
		for _, h := range hs[:max(0, len(hs)-n)] {
			if err := revokeWith(ctx, f, c, &revokeOptions{lock: i.Name, format: format}, h.Token); exitcode.Code(err) == exitcode.No {
				continue // gone by now
			} else if err != nil {
				return nil, fmt.Errorf("revoking the holder of %s (token %d): %w", output.Clean(i.Name), h.Token, err)
			}
			revoked = true
		}
		if revoked {
			locks = append(locks, i.Name)
		}
	}
	return locks, nil
}

// covered lists the locks a limit of the scope (name, prefix) covers that
// the coordinator knows: for a lock, that lock.
func covered(ctx context.Context, c coord.Coordinator, name string, prefix bool) ([]coord.LockInfo, error) {
	if !prefix {
		info, err := c.Inspect(ctx, name)
		if err != nil {
			return nil, err
		}
		info.Name = name
		return []coord.LockInfo{info}, nil
	}
	return c.List(ctx, name)
}

// recordLimit records a limit's event in the history of every lock in
// infos, best effort (the limit is set whatever the history says).
func recordLimit(ctx context.Context, c history.Store, infos []coord.LockInfo, kind history.Kind, l coord.Limit) {
	reason := l.Reason
	if l.Prefix {
		reason = strings.TrimSuffix(l.Scope()+": "+reason, ": ")
	}
	for _, i := range infos {
		ev := history.Event{Lock: i.Name, Kind: kind, Holder: l.By, Reason: reason, Time: l.At}
		if kind == history.Limited {
			ev.Count = l.Max
		}
		_ = c.Record(ctx, ev)
	}
}

func scopeWord(prefix bool) string {
	if prefix {
		return "prefix"
	}
	return "lock"
}

// limitView is an operator limit in JSON and YAML: part of a lock, or what
// limit and freeze set.
type limitView struct {
	Max    int     `json:"max" yaml:"max"`
	Frozen bool    `json:"frozen" yaml:"frozen"`
	Scope  string  `json:"scope" yaml:"scope"` // "lock" or "prefix"
	Name   string  `json:"name" yaml:"name"`   // the lock or the prefix
	Reason *string `json:"reason" yaml:"reason"`
	By     *string `json:"by" yaml:"by"`
	At     *string `json:"at" yaml:"at"`
}

func newLimitView(l *coord.Limit) *limitView {
	if l == nil {
		return nil
	}
	return &limitView{Max: l.Max, Frozen: l.Max == 0, Scope: scopeWord(l.Prefix), Name: l.Name,
		Reason: nonZero(l.Reason), By: nonZero(l.By), At: output.Time(l.At)}
}

// limitCell is a lock's limit in a table: "frozen", "max 1".
func limitCell(l *coord.Limit) string {
	switch {
	case l == nil:
		return "-"
	case l.Max == 0:
		return "frozen"
	}
	return "max " + strconv.Itoa(l.Max)
}
