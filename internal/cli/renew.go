package cli

import (
	"context"
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/fence-dev/fence/internal/exitcode"
	"github.com/fence-dev/fence/internal/output"
	"github.com/fence-dev/fence/pkg/coord"
)

type leaseOptions struct {
	lock    string
	leaseID string
}

func leaseFlag(cmd *cobra.Command, p *string) {
	cmd.Flags().StringVar(p, "lease", "", "lease id, as printed by acquire (required)")
	_ = cmd.MarkFlagRequired("lease")
}

func checkLeaseID(id string) error {
	if id == "" {
		return usageErrorf("--lease must not be empty")
	}
	if output.Clean(id) != id || len(id) > 256 {
		return fmt.Errorf("%w: invalid lease id %s", coord.ErrInvalid, output.Clean(id))
	}
	return nil
}

func newCmdRenew(f *Factory) *cobra.Command {
	o := &leaseOptions{}
	cmd := &cobra.Command{
		Use:   "renew LOCK --lease ID",
		Short: "Extend a lease by its TTL",
		Long: `Extend the lease ID on LOCK by its TTL. Prints nothing; exits 0 when renewed,
76 when the lease is gone (expired, revoked or released), and 125 when ID is not
a lease id or is the lease of another lock (nothing is renewed).`,
		Example:           `  fence renew nightly-backup --lease "$FENCE_LEASE_ID" || exit`,
		Args:              lockArg,
		ValidArgsFunction: completeLocks(f),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.lock = args[0]
			return runRenew(cmd.Context(), f, o)
		},
	}
	leaseFlag(cmd, &o.leaseID)
	return cmd
}

func runRenew(ctx context.Context, f *Factory, o *leaseOptions) error {
	if err := checkLeaseID(o.leaseID); err != nil {
		return err
	}
	return f.withCoordinator(ctx, func(c coord.Coordinator) error {
		r, err := c.Renew(ctx, o.lock, o.leaseID)
		if errors.Is(err, coord.ErrLeaseLost) {
			return exitcode.New(exitcode.LeaseLost, fmt.Errorf("renew %s: lease %s is gone (expired, revoked or released)", output.Clean(o.lock), output.Clean(o.leaseID)))
		}
		if err != nil {
			return fmt.Errorf("renew %s: %w", output.Clean(o.lock), err)
		}
		f.verbosef("renewed %s: ttl %v", output.Clean(o.lock), r.TTL)
		return nil
	})
}

func newCmdRelease(f *Factory) *cobra.Command {
	o := &leaseOptions{}
	cmd := &cobra.Command{
		Use:   "release LOCK --lease ID",
		Short: "End a lease",
		Long: `End the lease ID on LOCK. Prints nothing; exits 0, also when the lease is
already gone, and 125 when ID is not a lease id or is the lease of another lock
(nothing is released).`,
		Example:           `  fence release nightly-backup --lease "$FENCE_LEASE_ID"`,
		Args:              lockArg,
		ValidArgsFunction: completeLocks(f),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.lock = args[0]
			if err := checkLeaseID(o.leaseID); err != nil {
				return err
			}
			return f.withCoordinator(cmd.Context(), func(c coord.Coordinator) error {
				if err := c.Release(cmd.Context(), o.lock, o.leaseID); err != nil {
					return fmt.Errorf("release %s: %w", output.Clean(o.lock), err)
				}
				return nil
			})
		},
	}
	leaseFlag(cmd, &o.leaseID)
	return cmd
}

type revokeOptions struct {
	lock   string
	format string
}

func newCmdRevoke(f *Factory) *cobra.Command {
	o := &revokeOptions{}
	cmd := &cobra.Command{
		Use:   "revoke LOCK [-o text|json]",
		Short: "End the current holder's lease, whoever holds it",
		Long: `End the current holder's lease on LOCK, whoever holds it: an operator's tool.
A 'fence run' holding the lock stops its command and exits 76. Prints the lease
it ended; exits 0, or 1 when the lock is free.`,
		Args:              lockArg,
		ValidArgsFunction: completeLocks(f),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.lock = args[0]
			format, err := parseFormat(o.format, output.Text, output.JSON)
			if err != nil {
				return err
			}
			return f.withCoordinator(cmd.Context(), func(c coord.Coordinator) error {
				info, err := c.Revoke(cmd.Context(), o.lock)
				if errors.Is(err, coord.ErrNotHeld) {
					return exitcode.New(exitcode.No, fmt.Errorf("revoke %s: the lock is free", output.Clean(o.lock)))
				}
				if err != nil {
					return fmt.Errorf("revoke %s: %w", output.Clean(o.lock), err)
				}
				if format == output.JSON {
					return output.WriteJSON(f.IO.Out, newLockView(info, f.Now()))
				}
				_, err = fmt.Fprintf(f.IO.Out, "revoked %s: lease %s of %s, token %d\n",
					output.Clean(info.Name), output.Clean(info.LeaseID), output.Clean(info.Holder), info.Token)
				return err
			})
		},
	}
	formatFlag(cmd, &o.format, output.Text, output.JSON)
	return cmd
}
