package supervise

import (
	"context"
	"strconv"
	"strings"

	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/fencing"
)

// `fence run A B C -- COMMAND`: Options.Locks (how they are taken, held and
// released: see there).

// SetLeases are the leases of set, in the order the names were given.
func SetLeases(set *fencing.Set) []coord.Lease {
	var out []coord.Lease
	for _, h := range set.Helds() {
		out = append(out, h.Lease())
	}
	return out
}

// locksEnv is what the command of `fence run A B C` learns of its leases:
// FENCE_LOCKS (how many), FENCE_LOCK_i, FENCE_TOKEN_i and FENCE_LEASE_ID_i
// for i = 1..N in the order given, FENCE_HOLDER and FENCE_TTL. FENCE_LOCK,
// FENCE_TOKEN and FENCE_LEASE_ID are not set (they are removed).
func locksEnv(leases []coord.Lease) map[string]string {
	m := map[string]string{"FENCE_LOCKS": strconv.Itoa(len(leases))}
	for i, l := range leases {
		n := strconv.Itoa(i + 1)
		m["FENCE_LOCK_"+n] = l.Name
		m["FENCE_TOKEN_"+n] = strconv.FormatUint(l.Token, 10)
		m["FENCE_LEASE_ID_"+n] = l.ID
	}
	if len(leases) > 0 {
		m["FENCE_HOLDER"] = leases[0].Holder
		m["FENCE_TTL"] = strconv.FormatFloat(leases[0].TTL.Seconds(), 'f', -1, 64)
	}
	return m
}

// isSetVar reports whether k is one of the variables locksEnv sets for a set
// (FENCE_LOCKS, FENCE_LOCK_3, ...): inherited ones are removed.
func isSetVar(k string) bool {
	if k == "FENCE_LOCKS" {
		return true
	}
	for _, p := range []string{"FENCE_LOCK_", "FENCE_TOKEN_", "FENCE_LEASE_ID_"} {
		if rest, ok := strings.CutPrefix(k, p); ok && rest != "" && strings.Trim(rest, "0123456789") == "" {
			return true
		}
	}
	return false
}

// holdSet takes and holds the set of Options.Locks, as holdLock does one
// lock; the set is released in reverse order.
func (r *Runner) holdSet(ctx context.Context) (*HeldSet, func(context.Context) error, error) {
	acq := r.acquireOptions()
	acq.Slots = 0
	set, err := fencing.AcquireSet(ctx, r.c, r.p.Locks, acq, r.holdOptions()...)
	if err != nil {
		return nil, nil, err
	}
	return NewHeldSet(set.Helds(), locksEnv(SetLeases(set))), set.Release, nil
}
