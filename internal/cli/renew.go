package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/fence-dev/fence/internal/exitcode"
	"github.com/fence-dev/fence/internal/output"
	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/history"
)

// newLeasesCmd is renew or release (cmd): LOCK... and --lease, one id per
// lock, checked before the coordinator is opened; each gets the open
// coordinator, the locks and their ids.
func newLeasesCmd(f *Factory, cmd *cobra.Command, each func(ctx context.Context, c coord.Coordinator, locks, ids []string) error) *cobra.Command {
	var given []string // as given: --lease repeated, or comma-separated
	cmd.Args, cmd.ValidArgsFunction = locksArgs, completeLocks(f)
	cmd.RunE = func(cmd *cobra.Command, locks []string) error {
		ids, err := leaseIDs(locks, given)
		if err != nil {
			return err
		}
		return f.withCoordinator(cmd.Context(), func(c history.Recorder) error {
			return each(cmd.Context(), c, locks, ids)
		})
	}
	cmd.Flags().StringArrayVar(&given, "lease", nil, "lease id, as printed by acquire (required); with several locks, one per lock in the same order (repeated, or comma-separated)")
	_ = cmd.MarkFlagRequired("lease")
	return cmd
}

// leaseIDs are the lease ids of locks, in their order. One lock takes one
// --lease, as given; several take one id each, from repeated or
// comma-separated --lease values.
func leaseIDs(locks, given []string) ([]string, error) {
	ids := given
	if len(locks) > 1 || len(given) > 1 {
		ids = nil
		for _, v := range given {
			ids = append(ids, strings.Split(v, ",")...)
		}
	}
	for _, id := range ids {
		if id == "" {
			return nil, usageErrorf("--lease must not be empty")
		}
		if output.Clean(id) != id || len(id) > 256 {
			return nil, fmt.Errorf("%w: invalid lease id %s", coord.ErrInvalid, output.Clean(id))
		}
	}
	if len(ids) != len(locks) {
		return nil, usageErrorf("%d lock(s) and %d lease id(s): give one --lease per lock, in the same order", len(locks), len(ids))
	}
	return ids, nil
}

func newCmdRenew(f *Factory) *cobra.Command {
	return newLeasesCmd(f, &cobra.Command{
		Use:   "renew LOCK... --lease ID[,ID...]",
		Short: "Extend a lease by its TTL",
		Long: `Extend the lease ID on LOCK by its TTL. Prints nothing; exits 0 when renewed,
76 when the lease is gone (expired, revoked or released), and 125 when ID is not
a lease id of this coordinator (one of the other backend's form) or is the
lease of another lock (nothing is renewed).

Several locks (as taken by 'fence acquire A B C') take one lease id each, in
the same order: --lease ID1,ID2,ID3 or --lease repeated. Every lease is
renewed; the exit is 76 when any of them is gone (naming it).`,
		Example: `  fence renew nightly-backup --lease "$FENCE_LEASE_ID" || exit
  fence renew db/orders db/invoices --lease "$FENCE_LEASE_ID_1,$FENCE_LEASE_ID_2" || exit`,
	}, func(ctx context.Context, c coord.Coordinator, locks, ids []string) error {
		var gone error
		for i, lock := range locks {
			r, err := c.Renew(ctx, lock, ids[i])
			if errors.Is(err, coord.ErrLeaseLost) {
				err = exitcode.New(exitcode.LeaseLost, fmt.Errorf("renew %s: lease %s is gone (expired, revoked or released)", output.Clean(lock), output.Clean(ids[i])))
				if gone == nil {
					gone = err
				}
				if len(locks) > 1 {
					f.verbosef("%v", err)
				}
				continue
			}
			if err != nil {
				return fmt.Errorf("renew %s: %w", output.Clean(lock), err)
			}
			f.verbosef("renewed %s: ttl %v", output.Clean(lock), r.TTL)
		}
		return gone
	})
}

func newCmdRelease(f *Factory) *cobra.Command {
	return newLeasesCmd(f, &cobra.Command{
		Use:   "release LOCK... --lease ID[,ID...]",
		Short: "End a lease",
		Long: `End the lease ID on LOCK. Prints nothing; exits 0, also when the lease is
already gone, and 125 when ID is not a lease id of this coordinator (one of the
other backend's form) or is the lease of another lock (nothing is released).

Several locks (as taken by 'fence acquire A B C') take one lease id each, in
the same order: --lease ID1,ID2,ID3 or --lease repeated. They are released in
reverse byte order of their names (the reverse of the order acquire took them
in), every one even when one fails.`,
		Example: `  fence release nightly-backup --lease "$FENCE_LEASE_ID"
  fence release db/orders db/invoices --lease "$FENCE_LEASE_ID_1,$FENCE_LEASE_ID_2"`,
	}, func(ctx context.Context, c coord.Coordinator, locks, ids []string) error {
		var first error
		for _, lock := range slices.Backward(slices.Sorted(slices.Values(locks))) {
			i := slices.Index(locks, lock) // locks are distinct (locksArgs)
			if err := c.Release(ctx, lock, ids[i]); err != nil && first == nil {
				first = fmt.Errorf("release %s: %w", output.Clean(lock), err)
			}
		}
		return first
	})
}

type revokeOptions struct {
	lock    string
	format  output.Format
	force   bool
	timeout time.Duration
}

func newCmdRevoke(f *Factory) *cobra.Command {
	o := &revokeOptions{}
	var arg string
	var token uint64
	cmd := lockCmd(f, &cobra.Command{
		Use:   "revoke LOCK [--token N] [--force] [--timeout D] [-o text|json]",
		Short: "End the current holder's lease, after asking its fence run to stop",
		Long: `End the current holder's lease on LOCK: an operator's tool.

By default fence first asks the holder's 'fence run' to stop its command and
release the lease, and waits up to --timeout (default: the lease's TTL) for
that release: the run stops its command with its usual stop sequence (its
--signal, then SIGKILL after its --grace), waits until nothing of the
command's tree is left, releases and exits 76. So the next holder never
starts beside the old command. The ask reaches a running 'fence run' at once,
on both coordinators. When the holder has not released by --timeout (it is
frozen, say), or at once with --force, fence ends the lease itself; a lease
with no 'fence run' attached (taken with 'fence acquire') is ended at once.

--token N revokes only the holder with token N. A lock with several holders
(a semaphore, --slots) needs it: without --token, revoke refuses with exit 125
and lists their tokens. Prints the lease it ended; exits 0, or 1 when the lock
is free or, with --token, held under another token.`,
		Example: `  fence revoke nightly-backup
  fence revoke nightly-backup --token 42 --timeout 30s
  fence revoke nightly-backup --force`,
	}, func() (err error) {
		if arg != "" {
			if token, err = ParseToken(arg); err != nil {
				return fmt.Errorf("%w: --token: %v", coord.ErrInvalid, err)
			}
		}
		if o.timeout != 0 && o.force {
			return usageErrorf("--timeout and --force do not go together: --force ends the lease at once")
		}
		return nil
	}, func(ctx context.Context, c history.Recorder, lock string) error {
		o.lock = lock
		return revokeWith(ctx, f, c, o, token)
	})
	formatFlag(cmd, &o.format, output.Text, output.JSON)
	cmd.Flags().StringVar(&arg, "token", "", "revoke only the holder with this fencing token")
	cmd.Flags().BoolVar(&o.force, "force", false, "end the lease at once, without asking its fence run to stop first")
	DurationVarP(cmd.Flags(), &o.timeout, "timeout", "", 0, false, "how long to wait for the holder to stop and release before ending its lease (default: the lease's TTL)")
	return cmd
}

// defaultRevokeTimeout is --timeout when the lease's TTL is not known.
const defaultRevokeTimeout = 15 * time.Second

// revokeWith is revoke of the holder with token (0: the holder) on the
// open coordinator c (also fence freeze --revoke); o.timeout 0 is the
// lease's TTL.
func revokeWith(ctx context.Context, f *Factory, c coord.Coordinator, o *revokeOptions, token uint64) error {
	name := output.Clean(o.lock)
	no := func(info coord.LockInfo, err error) error {
		switch {
		case errors.Is(err, coord.ErrNotHeld):
			return exitcode.New(exitcode.No, fmt.Errorf("revoke %s: the lock is free", name))
		case errors.Is(err, coord.ErrOtherToken) && len(info.Holders) > 1:
			return exitcode.New(exitcode.No, fmt.Errorf("revoke %s: held under tokens %s, not %d: nothing was revoked",
				name, tokensOf(info), token))
		case errors.Is(err, coord.ErrOtherToken):
			return exitcode.New(exitcode.No, fmt.Errorf("revoke %s: held by %s under token %d, not %d: nothing was revoked",
				name, output.Clean(info.Holder), info.Token, token))
		}
		return fmt.Errorf("revoke %s: %w", name, err)
	}
	start := time.Now()
	var info coord.LockInfo
	var asked bool
	ended := "revoked" // "released" when the holder released the lease when asked
	if !o.force {
		var err error
		if info, asked, err = c.RequestStop(ctx, o.lock, token); err != nil {
			return no(info, err)
		}
	}
	if asked {
		timeout := o.timeout
		if timeout == 0 {
			timeout = info.TTL
			if timeout <= 0 {
				timeout = defaultRevokeTimeout
			}
		}
		f.verbosef("asked %s (token %d) to stop and release %s; waiting up to %v", output.Clean(info.Holder), info.Token, name, timeout)
		wctx, cancel := context.WithTimeout(ctx, timeout)
		err := c.WaitEnded(wctx, o.lock, info.Token)
		cancel()
		switch {
		case err == nil:
			ended = "released"
		case ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded):
			f.logLine(slog.LevelInfo, fmt.Sprintf("revoke %s: the holder did not release the lease within %v: ending it", name, timeout))
		default:
			return fmt.Errorf("revoke %s: waiting for the holder to release: %w", name, err)
		}
		token = info.Token
	}
	if ended == "revoked" {
		i, err := c.RevokeToken(ctx, o.lock, token)
		switch {
		case asked && (errors.Is(err, coord.ErrNotHeld) || errors.Is(err, coord.ErrOtherToken)):
			ended = "released" // it ended just now, after all
		case err != nil:
			return no(i, err)
		default:
			info = i
		}
	}
	waited := output.Seconds(time.Since(start))
	if ended == "released" && o.format != output.JSON {
		f.verbosef("the holder released the lease when asked, after %.3fs", waited)
	}
	return f.write(o.format, struct {
		lockView
		Ended         string  `json:"ended"` // "released" or "revoked"
		WaitedSeconds float64 `json:"waited_seconds"`
	}{newLockView(info, f.Now()), ended, waited}, textLine(fmt.Sprintf("revoked %s: lease %s of %s, token %d",
		output.Clean(info.Name), output.Clean(info.LeaseID), output.Clean(info.Holder), info.Token)))
}
