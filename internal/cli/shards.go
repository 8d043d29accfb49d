package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fence-dev/fence/pkg/history"

	"github.com/spf13/cobra"

	"github.com/fence-dev/fence/internal/exitcode"
	"github.com/fence-dev/fence/internal/output"
	"github.com/fence-dev/fence/internal/supervise"
	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/fencing"
	"github.com/fence-dev/fence/pkg/guard"
	"github.com/fence-dev/fence/pkg/shards"
)

func newCmdShards(f *Factory) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "shards",
		Short: "Ownership partitioning: a group's shards, each owned by one member under its own lease and token",
		Long: `The members of a group share N shards. Each shard is owned by one member at a
time, under a lease of its own with its own fencing token, so that storage can
fence each shard separately. Every member computes the same balanced map from
the live members (rendezvous hashing with a balance bound); a shard moves only
after its old owner released it or its lease ended.

Locks used: GROUP/members/ID (a member), GROUP/shard/N (a shard),
GROUP/settings (written under by drain, serial and parallel).`,
	}
	cmd.AddCommand(newCmdShardsRun(f), newCmdShardsShow(f), newCmdShardsDrain(f, true), newCmdShardsDrain(f, false),
		newCmdShardsSerial(f), newCmdShardsParallel(f))
	return cmd
}

type shardsRunOptions struct {
	shards      int
	member      string
	ttl, settle time.Duration
	grace       time.Duration
	signal      string
	shell       bool
}

func newCmdShardsRun(f *Factory) *cobra.Command {
	o := &shardsRunOptions{}
	cmd := &cobra.Command{
		Use:   "run GROUP --shards N [--member ID] [--settle D] -- COMMAND [ARG...]",
		Short: "Join GROUP and run a command under the shards it gives this member",
		Long: `Join GROUP as member ID (default HOSTNAME:PID) and run COMMAND under the shards
the group's map gives this member. COMMAND gets FENCE_GROUP, FENCE_MEMBER,
FENCE_SHARDS (comma-separated shard numbers) and FENCE_SHARD_TOKENS
(shard:token,...): fence each shard's writes with its own token.

When the member's set changes (members join or leave, drain, serial,
parallel), COMMAND is stopped with --signal (SIGKILL after --grace), the
shards given up are released, new ones taken, and COMMAND started again with
the new set. A membership change applies after --settle without a further
change. Losing one shard's lease stops COMMAND before that lease can expire,
even when fence is frozen, as fence run does; it is then started again with
the shards left. fence revoke GROUP/shard/N stops COMMAND at once and gives
the shard up (its owner then takes it again under a new token); fence revoke
GROUP/members/ID makes the member leave the group (exit 76). fence exits with
COMMAND's code when it ends on its own.`,
		Example: `  fence shards run billing --shards 64 -- ./worker   # reads $FENCE_SHARDS, $FENCE_SHARD_TOKENS`,
		Args: commandArgs("shards run", "group", "--shards N", func(groups []string) error {
			if len(groups) > 1 {
				return usageErrorf("shards run takes one GROUP before \"--\", got %d arguments: %q", len(groups), groups)
			}
			return shards.ValidateGroup(groups[0])
		}),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runShardsRun(cmd, f, o, args[0], args[1:])
		},
	}
	fs := cmd.Flags()
	fs.IntVar(&o.shards, "shards", 0, "number of shards of the group (the same for every member)")
	fs.StringVar(&o.member, "member", "", "this member's id (default HOSTNAME:PID)")
	DurationVarP(fs, &o.ttl, "ttl", "", DefaultTTL, false, "time to live of the member's and the shards' leases")
	// --settle defaults to package shards' own default (1s).
	DurationVarP(fs, &o.settle, "settle", "", time.Second, true, "how long a membership change must last before the map changes")
	DurationVarP(fs, &o.grace, "grace", "", 0, false, "time between the stop signal and SIGKILL (default: TTL/5, at most 5s)")
	fs.StringVar(&o.signal, "signal", "TERM", "signal that starts the stop sequence")
	fs.BoolVar(&o.shell, "shell", false, "COMMAND is one string run by /bin/sh -c")
	return cmd
}

func runShardsRun(cmd *cobra.Command, f *Factory, o *shardsRunOptions, group string, command []string) error {
	if !cmd.Flags().Changed("shards") {
		return usageErrorf("shards run needs --shards N (the same for every member of %q)", group)
	}
	if o.shards < 1 || o.shards > shards.MaxShards {
		return fmt.Errorf("%w: --shards must be 1 to %d, got %d", coord.ErrInvalid, shards.MaxShards, o.shards)
	}
	if cmd.Flags().Changed("member") && strings.TrimSpace(o.member) == "" {
		return usageErrorf("--member %q is blank: give this member's id, or leave --member out for HOSTNAME:PID", o.member)
	}
	if o.member != "" {
		if err := shards.ValidateMember(o.member); err != nil {
			return err
		}
	}
	sig, err := supervise.ParseSignal(o.signal)
	if err != nil {
		return err
	}
	cfg, err := f.Config()
	if err != nil {
		return err
	}
	sopts := supervise.Options{
		Lock: group, Command: command, Shell: o.shell, TTL: o.ttl,
		Grace: o.grace, Signal: sig, Verbose: cfg.Verbose, Quiet: cfg.Quiet, LogFormat: cfg.LogFormat,
		Stdin: f.IO.In, Stdout: f.IO.Out, Stderr: f.IO.ErrOut,
		Location: location(cfg), Handover: handover(cfg),
	}
	// The options are checked before joining: a bad --ttl or --grace is
	// refused without taking a lease (and without starting a watchdog).
	if err := supervise.Check(sopts); err != nil {
		return exitcode.New(exitcode.Failure, err)
	}
	ctx := context.WithoutCancel(cmd.Context())
	return withGuard(ctx, f, func(c history.Recorder, g guard.Guard) error {
		recordEvent := func(ev history.Event) {
			ev.Time = time.Now()
			go func() {
				rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				_ = c.Record(rctx, ev)
			}()
		}
		sr := &supervise.ShardRunner{}
		m, err := shards.Join(ctx, c, group, o.shards,
			shards.WithMember(o.member), shards.WithTTL(o.ttl), shards.WithSettle(o.settle), shards.WithGuard(g),
			shards.WithProcess(&coord.ProcessInfo{PIDs: []int{os.Getpid()}}),
			shards.WithHold(fencing.OnRenewal(sr.OnRenewal)),
			shards.OnMove(func(mv shards.Move) {
				kind := map[string]history.Kind{"taken": history.ShardTaken, "given_up": history.ShardGivenUp, "lost": history.ShardLost}[mv.Kind]
				msg := fmt.Sprintf("shard %d %s (token %d)", mv.Shard, strings.ReplaceAll(mv.Kind, "_", " "), mv.Token)
				if mv.Reason != "" {
					msg += ": " + mv.Reason
				}
				f.verbosef("%s", msg)
				recordEvent(history.Event{Lock: mv.Lock, Kind: kind, Holder: mv.Member, Token: mv.Token, Reason: mv.Reason})
			}))
		if err != nil {
			if errors.Is(err, coord.ErrBusy) {
				return exitcode.New(exitcode.Failure, fmt.Errorf("%w: %v", coord.ErrInvalid, err))
			}
			return err
		}
		sr.OnRestart = func(n int, _ []int, reason string) {
			f.verbosef("restarting the command (%d): %s", n, reason)
			recordEvent(history.Event{Lock: m.Lease().Name, Kind: history.Restarted, Holder: m.ID(), Count: n, Reason: reason})
		}
		code, runErr := sr.Run(ctx, c, m, sopts, o.settle)
		lctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := m.Leave(lctx); err != nil {
			f.warnf("leaving group %q: %v", group, err)
		}
		return commandExit(code, runErr, command, o.shell)
	})
}

// shardsView is `fence shards show`'s JSON.
type shardsView struct {
	Group    string           `json:"group"`
	Members  []memberView     `json:"members"`
	Settings shards.Settings  `json:"settings"`
	Shards   []shardView      `json:"shards"`
	Map      map[string][]int `json:"map"`
}

type memberView struct {
	ID      string  `json:"id"`
	Since   *string `json:"since,omitempty"`
	Drained bool    `json:"drained,omitempty"`
	Shards  int     `json:"shards"`
}

type shardView struct {
	Shard int     `json:"shard"`
	Owner string  `json:"owner,omitempty"`
	Token uint64  `json:"token,omitempty"`
	Since *string `json:"since,omitempty"`
}

func newCmdShardsShow(f *Factory) *cobra.Command {
	var format output.Format
	cmd := &cobra.Command{
		Use:   "show GROUP [-o text|json]",
		Short: "Show a group's members, settings, and each shard's owner, token and since when",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runShardsShow(cmd.Context(), f, args[0], format)
		},
	}
	formatFlag(cmd, &format, output.Text, output.JSON)
	return cmd
}

func runShardsShow(ctx context.Context, f *Factory, group string, format output.Format) error {
	if err := shards.ValidateGroup(group); err != nil {
		return err
	}
	return withGuard(ctx, f, func(c history.Recorder, g guard.Guard) error {
		st, err := shards.LoadSettings(ctx, g, group)
		if err != nil {
			return err
		}
		infos, err := c.List(ctx, group+"/")
		if err != nil {
			return err
		}
		v := shardsViewOf(group, st, infos)
		return f.write(format, v, func(w io.Writer) error { return writeShards(w, f.IO.IsStdoutTTY(), v) })
	})
}

// shardsViewOf is fence shards show's view of group from its locks
// (infos): the held members and shards, who owns which.
func shardsViewOf(group string, st shards.Settings, infos []coord.LockInfo) shardsView {
	v := shardsView{Group: group, Settings: st, Map: map[string][]int{}, Shards: []shardView{}, Members: []memberView{}}
	count := map[string]int{}
	for _, in := range infos {
		if !in.Held {
			continue
		}
		rest := strings.TrimPrefix(in.Name, group+"/")
		if id, ok := strings.CutPrefix(rest, "members/"); ok && shards.ValidateMember(id) == nil {
			v.Members = append(v.Members, memberView{ID: id, Since: output.Time(in.AcquiredAt), Drained: slices.Contains(st.Drained, id)})
		}
		if s, ok := strings.CutPrefix(rest, "shard/"); ok {
			k, err := strconv.Atoi(s)
			if err != nil || strconv.Itoa(k) != s {
				continue
			}
			v.Shards = append(v.Shards, shardView{Shard: k, Owner: in.Holder, Token: in.Token, Since: output.Time(in.AcquiredAt)})
			v.Map[in.Holder] = append(v.Map[in.Holder], k)
			count[in.Holder]++
		}
	}
	slices.SortFunc(v.Shards, func(a, b shardView) int { return a.Shard - b.Shard })
	for i := range v.Members {
		v.Members[i].Shards = count[v.Members[i].ID]
	}
	for _, ks := range v.Map { // also an owner whose member lease ended
		slices.Sort(ks)
	}
	return v
}

// writeShards writes fence shards show's text: a line on the group, its
// members, its shards.
func writeShards(w io.Writer, tty bool, v shardsView) error {
	st := v.Settings
	fmt.Fprintf(w, "group %s: %d members, %d shards held", v.Group, len(v.Members), len(v.Shards))
	if len(st.Drained) > 0 || st.Serial != nil {
		fmt.Fprintf(w, " (%s)", settingsText(st))
	}
	fmt.Fprintln(w)
	rows := [][]string{}
	for _, mv := range v.Members {
		d := ""
		if mv.Drained {
			d = "drained"
		}
		rows = append(rows, []string{mv.ID, strconv.Itoa(mv.Shards), output.Ranges(v.Map[mv.ID]), d})
	}
	if err := output.WriteTable(w, tty, []string{"MEMBER", "SHARDS", "OWNS", "STATE"}, rows); err != nil {
		return err
	}
	rows = rows[:0]
	for _, s := range v.Shards {
		since := ""
		if s.Since != nil {
			since = *s.Since
		}
		rows = append(rows, []string{strconv.Itoa(s.Shard), s.Owner, strconv.FormatUint(s.Token, 10), since})
	}
	return output.WriteTable(w, tty, []string{"SHARD", "OWNER", "TOKEN", "SINCE"}, rows)
}

func settingsText(st shards.Settings) string {
	var p []string
	if len(st.Drained) > 0 {
		p = append(p, "drained: "+strings.Join(st.Drained, ","))
	}
	if st.Serial != nil {
		s := "serial"
		if *st.Serial != "" {
			s += " on " + *st.Serial
		}
		p = append(p, s)
	}
	return strings.Join(p, "; ")
}

func updateSettings(cmd *cobra.Command, f *Factory, group string, change func(*shards.Settings)) error {
	if err := shards.ValidateGroup(group); err != nil {
		return err
	}
	return withGuard(cmd.Context(), f, func(c history.Recorder, g guard.Guard) error {
		st, err := shards.UpdateSettings(cmd.Context(), c, g, group, 10*time.Second, change)
		if err != nil {
			return err
		}
		text := settingsText(st)
		if text == "" {
			text = "parallel, nothing drained"
		}
		fmt.Fprintf(f.IO.Out, "group %s: %s\n", group, text)
		return nil
	})
}

func newCmdShardsDrain(f *Factory, drain bool) *cobra.Command {
	use, short := "drain GROUP MEMBER", "Give MEMBER's shards away (before maintenance); it takes none until undrained"
	if !drain {
		use, short = "undrain GROUP MEMBER", "Let a drained MEMBER take shards again"
	}
	return &cobra.Command{
		Use: use, Short: short, Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := shards.ValidateMember(args[1]); err != nil {
				return err
			}
			return updateSettings(cmd, f, args[0], func(s *shards.Settings) {
				s.Drained = slices.DeleteFunc(s.Drained, func(id string) bool { return id == args[1] })
				if drain {
					s.Drained = append(s.Drained, args[1])
				}
			})
		},
	}
}

func newCmdShardsSerial(f *Factory) *cobra.Command {
	var member string
	cmd := &cobra.Command{
		Use:   "serial GROUP [--member ID]",
		Short: "Kill switch: one member takes every shard (safe serial processing)",
		Long: `One member of GROUP takes every shard: --member ID when it is live and not
drained, else the first live undrained member in byte order. The setting
persists until fence shards parallel GROUP.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if member != "" {
				if err := shards.ValidateMember(member); err != nil {
					return err
				}
			}
			return updateSettings(cmd, f, args[0], func(s *shards.Settings) { s.Serial = &member })
		},
	}
	cmd.Flags().StringVar(&member, "member", "", "the member that takes every shard")
	return cmd
}

func newCmdShardsParallel(f *Factory) *cobra.Command {
	return &cobra.Command{
		Use: "parallel GROUP", Short: "End serial mode: the shards are spread over the members again", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return updateSettings(cmd, f, args[0], func(s *shards.Settings) { s.Serial = nil })
		},
	}
}
