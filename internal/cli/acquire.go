package cli

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/fence-dev/fence/internal/output"
	"github.com/fence-dev/fence/internal/supervise"
	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/fencing"
	"github.com/fence-dev/fence/pkg/history"
)

// DefaultTTL is the default lease TTL of acquire (and run).
const DefaultTTL = 15 * time.Second

type acquireOptions struct {
	leaseWait
	locks    []string
	anyOrder bool
	format   output.Format
	slots    int
}

func newCmdAcquire(f *Factory) *cobra.Command {
	o := &acquireOptions{}
	cmd := &cobra.Command{
		Use:   "acquire LOCK... [--ttl D] [--wait D | -n] [-o text|json|env]",
		Short: "Take a lease with no process attached and print its token and lease id",
		Long: `Take a lease on LOCK and print its fencing token and lease id. No process is
attached to the lease: it ends at its TTL unless renewed with 'fence renew', or
when released with 'fence release'.

By default acquire waits until the lock is free (waiters are served first come,
first served); --wait D gives up after D, -n (--wait 0) gives up at once. When
it gives up, acquire exits 75. Interrupted while it waits (SIGINT, SIGTERM,
SIGHUP), it leaves the queue and exits 128+N.

-o env prints FENCE_LOCK, FENCE_TOKEN and FENCE_LEASE_ID assignments, quoted
for the shell, for eval. When no lease was taken (busy, interrupted, coordinator
unreachable, bad input), it prints "(exit N)" instead, N being its exit code, so
that the eval fails with that code. Write 'eval "$(fence acquire ...)" || exit $?'
and the script stops there, with or without set -e.

--slots N takes one of N slots of LOCK (a semaphore, as 'fence run --slots'):
-o env then prints FENCE_SLOT too, text and -o json the slot.

Several locks (fence acquire A B C) are taken in byte order of their names,
whatever the order given (so that no two fence users deadlock), all or none
within --wait: when one is busy, those taken are released and acquire exits 75
naming it. While it waits for the next lock, acquire keeps the leases it took
renewed. It prints every lease, in the order given: -o env prints FENCE_LOCKS=N
and FENCE_LOCK_i, FENCE_TOKEN_i, FENCE_LEASE_ID_i (i = 1..N), -o json an object
with a "leases" array. Renew and release them together with
'fence renew A B C --lease ID1,ID2,ID3' (the ids in the same order).

Like fence run, acquire refuses (125) to take a lock that sorts before one an
enclosing fence run holds; --any-order allows it.`,
		Example: `  eval "$(fence acquire nightly-backup --ttl 10m -n -o env)" || exit $?
  trap 'fence release nightly-backup --lease "$FENCE_LEASE_ID"' EXIT
  backup-db --fencing-token "$FENCE_TOKEN"`,
		Args:              locksArgs,
		ValidArgsFunction: completeLocks(f),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.locks = args
			return runAcquire(cmd.Context(), f, cmd, o)
		},
	}
	o.addFlags(cmd.Flags())
	formatFlag(cmd, &o.format, output.Text, output.JSON, output.Env)
	cmd.Flags().IntVar(&o.slots, "slots", 1, "let up to N hold the lock at once (a semaphore); prints the slot taken, 0 to N-1")
	cmd.Flags().BoolVar(&o.anyOrder, "any-order", false, "take a lock that sorts before one an enclosing fence run holds (this is how nested fences deadlock)")
	return cmd
}

func runAcquire(ctx context.Context, f *Factory, cmd *cobra.Command, o *acquireOptions) error {
	if err := coord.ValidateTTL(o.ttl); err != nil {
		return err
	}
	if err := checkSlotsFlag(o.slots, len(o.locks)); err != nil {
		return err
	}
	wait, err := o.waitFor(cmd)
	if err != nil {
		return err
	}
	holder, err := f.holder(parentHolder)
	if err != nil {
		return err
	}
	ctx, interrupted, stop := interruptible(ctx)
	defer stop()
	var leases []coord.Lease
	err = f.withCoordinator(ctx, func(c history.Recorder) error {
		if err := checkOrder(ctx, c, "acquire", o.locks, o.anyOrder); err != nil {
			return err
		}
		if len(o.locks) == 1 {
			lease, err := c.Acquire(ctx, o.locks[0], coord.AcquireOptions{
				TTL: o.ttl, Holder: holder, Wait: wait, Slots: o.slots,
				OnWait: func(cur coord.LockInfo) {
					f.verbosef("waiting for %s (token %d)", output.Clean(cur.Holder), cur.Token)
				},
			})
			if err == nil {
				leases = []coord.Lease{*lease}
			}
			return err
		}
		// The leases taken are kept renewed while the next lock is waited
		// for; once all are taken the renewals stop and every lease lasts
		// its TTL, as the lease of one lock does.
		hctx, stopHolds := context.WithCancel(ctx)
		defer stopHolds()
		set, err := fencing.AcquireSet(hctx, c, o.locks, coord.AcquireOptions{
			TTL: o.ttl, Holder: holder, Wait: wait,
			OnWait: func(cur coord.LockInfo) {
				f.verbosef("waiting for %s, held by %s (token %d)", output.Clean(cur.Name), output.Clean(cur.Holder), cur.Token)
			},
		})
		if err == nil {
			leases = supervise.SetLeases(set)
		}
		return err
	})
	if ierr := interrupted(); ierr != nil && err != nil {
		return ierr
	}
	if err != nil {
		return fmt.Errorf("acquire %s: %w", strings.Join(viewsOf(o.locks, output.Clean), " "), err)
	}
	return writeLeases(f.IO.Out, o.format, leases, o.slots > 1)
}

// writeLeases prints the leases acquire took: one lease's fields, or
// (several locks) FENCE_LOCKS=N and numbered variables, a "leases" array.
// slot adds each lease's slot of a semaphore.
func writeLeases(out io.Writer, format output.Format, leases []coord.Lease, slot bool) error {
	one := len(leases) == 1
	switch {
	case format == output.JSON && one:
		return output.WriteJSON(out, newLeaseView(leases[0]))
	case format == output.JSON:
		return output.WriteJSON(out, struct {
			Leases []leaseView `json:"leases"`
		}{viewsOf(leases, newLeaseView)})
	case format == output.Env:
		var b strings.Builder
		if one {
			l := leases[0]
			fmt.Fprintf(&b, "FENCE_LOCK=%s\nFENCE_TOKEN=%d\nFENCE_LEASE_ID=%s\n", output.ShellQuote(l.Name), l.Token, output.ShellQuote(l.ID))
			if slot {
				fmt.Fprintf(&b, "FENCE_SLOT=%d\n", l.Slot)
			}
		} else {
			fmt.Fprintf(&b, "FENCE_LOCKS=%d\n", len(leases))
			for i, l := range leases {
				fmt.Fprintf(&b, "FENCE_LOCK_%d=%s\nFENCE_TOKEN_%d=%d\nFENCE_LEASE_ID_%d=%s\n",
					i+1, output.ShellQuote(l.Name), i+1, l.Token, i+1, output.ShellQuote(l.ID))
			}
		}
		_, err := io.WriteString(out, b.String())
		return err
	}
	for i, l := range leases {
		if i > 0 {
			fmt.Fprintln(out)
		}
		fields := []output.Field{
			{Key: "lock", Value: l.Name},
			{Key: "token", Value: fmt.Sprint(l.Token)},
			{Key: "lease_id", Value: l.ID},
			{Key: "holder", Value: l.Holder},
			{Key: "ttl", Value: output.Duration(l.TTL)},
		}
		if slot {
			fields = append(fields, output.Field{Key: "slot", Value: fmt.Sprint(l.Slot)})
		}
		if err := output.WriteFields(out, fields); err != nil {
			return err
		}
	}
	return nil
}

// checkSlotsFlag checks --slots N of run and acquire: 1 to coord.MaxSlots,
// and above 1 only for one lock (several locks and one semaphore have no
// clear meaning together).
func checkSlotsFlag(n, locks int) error {
	switch {
	case n < 1 || n > coord.MaxSlots:
		return usageErrorf("--slots %d is out of range: give 1 (a lock, the default) to %d", n, coord.MaxSlots)
	case n > 1 && locks > 1:
		return usageErrorf("--slots %d takes one lock, not %d: take each semaphore with a fence of its own", n, locks)
	}
	return nil
}

// requestsEnv reports whether fence's arguments args ask for -o env
// (-o env, -oenv, -o=env, a cluster such as -no env, --output env,
// --output=env) before a "--". It reads the arguments themselves, not the
// parsed flags, so that a failure before or during the parsing of the flags
// (an unknown flag, a bad lock name, a mistyped command) also gets the
// failing snippet: when in doubt it answers yes, as printing the snippet for
// nothing costs less than an empty eval that runs the work unlocked.
func requestsEnv(args []string) bool {
	env := string(output.Env)
	for i, a := range args {
		// value is the flag's value: what follows in a, else the next argument.
		value := func(rest string) string {
			if rest != "" {
				return strings.TrimPrefix(rest, "=")
			}
			if i+1 < len(args) {
				return args[i+1]
			}
			return ""
		}
		switch {
		case a == "--":
			return false
		case a == "--output" || strings.HasPrefix(a, "--output="):
			if value(strings.TrimPrefix(a, "--output")) == env {
				return true
			}
		case len(a) > 1 && a[0] == '-' && a[1] != '-':
			if _, rest, ok := strings.Cut(a[1:], "o"); ok && value(rest) == env {
				return true
			}
		}
	}
	return false
}
