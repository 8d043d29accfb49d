package cli

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/fence-dev/fence/internal/exitcode"
	"github.com/fence-dev/fence/internal/output"
	"github.com/fence-dev/fence/pkg/coord"
)

// Several locks at once (`fence run A B C`, `fence acquire A B C`) and the
// lock-order check of nested fence calls.

// checkLocks checks the LOCK arguments of a command that takes several:
// valid names, none given twice.
func checkLocks(cmdName string, locks []string) error {
	seen := make(map[string]bool, len(locks))
	for _, l := range locks {
		if err := coord.ValidateName(l); err != nil {
			return err
		}
		if seen[l] {
			return usageErrorf("%s: lock %q is given twice", cmdName, output.Clean(l))
		}
		seen[l] = true
	}
	return nil
}

// locksArgs requires one LOCK argument or more and checks them.
func locksArgs(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return usageErrorf("%s needs a LOCK argument (usage: %s)", cmd.CommandPath(), cmd.UseLine())
	}
	return checkLocks(cmd.Name(), args)
}

// heldLock is a lock the environment says this process runs under.
type heldLock struct{ name, leaseID string }

// heldByEnv are the locks the environment says this process runs under:
// FENCE_LOCK_i and FENCE_LEASE_ID_i (i = 1..N of FENCE_LOCKS=N), else
// FENCE_LOCK and FENCE_LEASE_ID, as fence run gives its command.
func heldByEnv(getenv func(string) string) []heldLock {
	if n, err := strconv.Atoi(getenv("FENCE_LOCKS")); err == nil && n > 0 {
		var held []heldLock
		for i := 1; i <= n && i <= 10000; i++ {
			if l := getenv("FENCE_LOCK_" + strconv.Itoa(i)); l != "" {
				held = append(held, heldLock{l, getenv("FENCE_LEASE_ID_" + strconv.Itoa(i))})
			}
		}
		return held
	}
	if l := getenv("FENCE_LOCK"); l != "" {
		return []heldLock{{l, getenv("FENCE_LEASE_ID")}}
	}
	return nil
}

// checkOrder is the lock-order check of a nested fence: when the
// environment shows that this fence runs under locks of c (an enclosing
// fence run), it refuses (exit 125, one line naming both locks and the
// fix) to take a lock that sorts before one of them. Two programs that
// nest the same locks in opposite orders deadlock; in byte order they
// cannot. anyOrder (--any-order) skips it. The environment alone decides
// whether to look further (nothing is read from c when no lock is held,
// or none out of order): a refusal needs the lease the environment names
// to be live on c, which is how c is known to be the enclosing run's
// coordinator, whatever its location is called (a lock of another
// coordinator, or an inherited or hand-set FENCE_LOCK of a lease long
// gone, refuses nothing).
func checkOrder(ctx context.Context, c coord.Coordinator, cmdName string, locks []string, anyOrder bool) error {
	held := heldByEnv(os.Getenv)
	if anyOrder || len(held) == 0 {
		return nil
	}
	low := slices.Min(locks)
	// The largest first: the one to name.
	slices.SortFunc(held, func(a, b heldLock) int { return strings.Compare(b.name, a.name) })
	for _, h := range held {
		if low >= h.name || h.leaseID == "" {
			continue
		}
		info, err := c.Inspect(ctx, h.name)
		if err != nil || !info.Held || info.LeaseID != h.leaseID {
			continue
		}
		all := append([]string{h.name}, locks...)
		slices.Sort(all)
		all = slices.Compact(all)
		head, tail := "", "" // acquire's error says "acquire LOCK...: " before it
		if cmdName == "run" {
			head, tail = "run: ", " -- ..."
		}
		return exitcode.New(exitcode.Failure, fmt.Errorf(
			"%slock %q sorts before %q, which this command already holds (an enclosing fence run took it): nesting locks out of byte order can deadlock; take them in one fence (fence %s %s%s), which orders them, or nest them in byte order, or pass --any-order to allow it (and the deadlock)",
			head, output.Clean(low), output.Clean(h.name), cmdName, strings.Join(viewsOf(all, output.ShellQuote), " "), tail))
	}
	return nil
}
