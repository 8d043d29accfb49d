package supervise

import (
	"context"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/fencing"
)

// `fence run A B C -- COMMAND`: Options.Locks. The locks are taken with
// fencing.AcquireSet (byte order of their names, all or none within one
// --wait budget), then the command runs under a HeldSet of the set
// (stopped before the earliest lease can expire, and when any is lost or
// revoked), and the set is released in reverse order.

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

// acquireSet takes the set of Options.Locks (a signal ends the wait) and
// runs under it (r.hs), as acquireAndHold does for one lock.
func (r *runner) acquireSet(ctx context.Context, sigs <-chan os.Signal) (release func(context.Context) error, code int, err error) {
	p := r.p
	acq := r.acquireOptions()
	acq.Slots = 0
	var set *fencing.Set
	cause := r.interruptible(ctx, sigs, func(actx context.Context) error {
		set, err = fencing.AcquireSet(actx, r.c, p.Locks, acq, r.holdOptions()...)
		return err
	})
	if err == nil && cause != nil {
		// A signal came as the last lock was granted: do not start the command.
		releaseBounded(ctx, set.Release)
		err = &fencing.SetError{Lock: p.Locks[len(p.Locks)-1], Err: cause}
	}
	if err != nil {
		code, err := acquireFailure(ctx, cause, p, err)
		return nil, code, err
	}
	leases := SetLeases(set)
	r.useHolds(NewHeldSet(set.Helds(), locksEnv(leases)))
	for _, l := range leases {
		r.verbosef("acquired %q: token %d, lease %s, TTL %v", l.Name, l.Token, l.ID, l.TTL)
	}
	r.verbosef("waited %v for %d locks", r.m.wait.Round(time.Millisecond), len(leases))
	return func(ctx context.Context) error {
		err := set.Release(ctx)
		if err == nil {
			r.verbosef("released %s (in reverse order)", p.Lock)
		}
		return err
	}, 0, nil
}
