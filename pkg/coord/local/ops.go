package local

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/fence-dev/fence/internal/proc"
	"github.com/fence-dev/fence/pkg/clock"
	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/internal/coordkit"
)

// lost is the ErrLeaseLost error for a lease that is not live.
func lost(name, leaseID string, st *state, v verdict) error {
	why := v.why
	if h := st.Holder; h != nil && h.LeaseID != leaseID {
		why = fmt.Sprintf("is gone: the lock's holder is now %s (token %d)", h.Holder, h.Token)
	} else if h == nil {
		why = "is gone (released, revoked or expired)"
	}
	return fmt.Errorf("%w: lease %s on lock %q %s", coord.ErrLeaseLost, leaseID, name, why)
}

// Renew extends the lease by its TTL from now. It returns ErrLeaseLost when
// the lease is not live: released, revoked, expired, replaced, or attached
// to processes that are all gone; ErrInvalid for a malformed lease id or one
// of another lock.
func (c *coordinator) Renew(ctx context.Context, name, leaseID string) (coord.Renewal, error) {
	sent := time.Now()
	var r coord.Renewal
	err := c.onLease(ctx, name, leaseID, func(h *holder, now clock.Boot) (stateWrite, error) {
		h.ExpiresAt = now.Add(h.TTL)
		r = coord.Renewal{Sent: sent, TTL: h.TTL}
		return recordOnly, nil
	})
	if err != nil {
		return coord.Renewal{}, err
	}
	return r, nil
}

// onLease runs fn under the lock's flock on the live holder of lease
// leaseID of lock name (liveLease), and writes what fn reports. An id of
// 16 digits found on no holder is unknownID's ErrInvalid.
func (c *coordinator) onLease(ctx context.Context, name, leaseID string, fn func(h *holder, now clock.Boot) (stateWrite, error)) error {
	if err := checkLeaseID(name, leaseID); err != nil {
		return err
	}
	return c.update(ctx, c.files(name), func(st *state) (stateWrite, error) {
		if st.lease(leaseID) == nil {
			if err := unknownID(leaseID); err != nil {
				return noChange, err
			}
		}
		now := clock.Now()
		h, err := liveLease(name, st, leaseID, now)
		if err != nil {
			return noChange, err
		}
		return fn(h, now)
	})
}

// Release ends the lease; a lease that is already gone is not an error. A
// malformed lease id, or one of another lock, is ErrInvalid.
func (c *coordinator) Release(ctx context.Context, name, leaseID string) error {
	_, err := c.release(ctx, name, leaseID, nil)
	return err
}

// ReleaseWith releases lease leaseID of lock name, held under token, only
// while it holds the lock: under the lock's flock, once the lease is found
// live (not expired, revoked or replaced), and before the release is
// written, it calls before. The history store of this backend
// (localstore.Store.AppendRelease) writes the released event there, so that
// the event precedes the next holder's acquisition without a read of the
// lock of its own. held is false, with neither before nor the release done,
// when the lease does not hold the lock; an error of before ends the call
// with held true and nothing released.
func (c *coordinator) ReleaseWith(ctx context.Context, name, leaseID string, token uint64, before func() error) (held bool, err error) {
	if before == nil {
		before = func() error { return nil }
	}
	return c.release(ctx, name, leaseID, func(st *state, h *holder) (bool, error) {
		if h.Token != token {
			return false, nil
		}
		w, err := judgeAll(st, clock.Now())
		if err != nil {
			return false, err
		}
		if !slices.Contains(w.live, h) {
			return false, nil
		}
		return true, before()
	})
}

// release is Release; when check is set, it is called under the flock with
// the lease's holder record, and the release goes on only when it returns
// true and no error. held reports that the lease was found (and, with
// check, that check said so).
func (c *coordinator) release(ctx context.Context, name, leaseID string, check func(*state, *holder) (bool, error)) (held bool, err error) {
	if err := checkLeaseID(name, leaseID); err != nil {
		return false, err
	}
	f := c.files(name)
	if _, err := os.Lstat(f.state); os.IsNotExist(err) {
		return false, unknownID(leaseID) // never used
	}
	asked := false
	err = c.update(ctx, f, func(st *state) (stateWrite, error) {
		h := st.lease(leaseID)
		if h == nil {
			return noChange, unknownID(leaseID)
		}
		if check != nil {
			ok, err := check(st, h)
			if !ok || err != nil {
				held = ok
				return noChange, err
			}
		}
		held = true
		asked = stopAsked(st) == h.Token || h.StopAsked
		st.remove(h)
		return recordOnly, nil
	})
	if err == nil && asked {
		c.ringLock(f) // a revoker waits for this release (WaitEnded)
	}
	return held, err
}

// Revoke ends the current holder's lease and returns what it ended; it
// returns ErrNotHeld when the lock is free. The holder's next Renew fails
// with ErrLeaseLost, and its lease watch (WatchLease: fence run) reports the
// loss at once. A lease with no process attached is gone at once; one
// attached to processes leaves its command until its TTL to stop (fence run
// stops it at once): a successor takes over once the command's group is
// gone, and kills it when the TTL has run out.
func (c *coordinator) Revoke(ctx context.Context, name string) (coord.LockInfo, error) {
	return c.RevokeToken(ctx, name, 0)
}

// RevokeToken implements coord.Coordinator: Revoke, limited to the holder
// with token (0: any).
func (c *coordinator) RevokeToken(ctx context.Context, name string, token uint64) (coord.LockInfo, error) {
	li, _, err := c.onHolder(ctx, name, token, func(st *state, h *holder) (stateWrite, bool) {
		if h.attached() {
			h.Revoked = true
		} else {
			st.remove(h)
		}
		return rewrite, true // the holder's lease watch, and revokers waiting
	})
	return li, err
}

// onHolder runs fn under the lock's flock on the live holder with token (0:
// the only one; see pick), writes what fn reports, and rings the lock file
// (ringLock) when fn says so; it returns the lock's info and that.
func (c *coordinator) onHolder(ctx context.Context, name string, token uint64, fn func(st *state, h *holder) (stateWrite, bool)) (coord.LockInfo, bool, error) {
	if err := coord.ValidateName(name); err != nil {
		return coord.LockInfo{}, false, err
	}
	self, err := selfID()
	if err != nil {
		return coord.LockInfo{}, false, err
	}
	f := c.files(name)
	var li coord.LockInfo
	ring := false
	err = c.update(ctx, f, func(st *state) (stateWrite, error) {
		h, i, err := pick(name, st, token, clock.Now(), self)
		li = i
		if err != nil {
			return noChange, err
		}
		var ch stateWrite
		ch, ring = fn(st, h)
		return ch, nil
	})
	if err != nil {
		return li, false, err
	}
	if ring {
		c.ringLock(f)
	}
	return li, ring, nil
}

// AttachProcess attaches the live lease (name, leaseID) to processes: PIDs,
// when given, replace the supervising processes; PGID, when not 0, sets the
// command's process group. It returns ErrLeaseLost when the lease is not
// live, and ErrInvalid for a lease id as Renew does.
func (c *coordinator) AttachProcess(ctx context.Context, name, leaseID string, p coord.ProcessInfo) error {
	if err := coordkit.ValidateProcess(p); err != nil {
		return err
	}
	pids, group := resolveProcess(p)
	return c.onLease(ctx, name, leaseID, func(h *holder, _ clock.Boot) (stateWrite, error) {
		if !h.ours() && h.attached() {
			return noChange, fmt.Errorf("%w: lease %s on lock %q is attached to processes of another PID namespace", coord.ErrInvalid, leaseID, name)
		}
		// The supervising processes as recorded and a new group go in the
		// lease record (fence run attaches its command's group this way);
		// anything else replaces the state.
		ch := recordOnly
		if (len(pids) > 0 && !slices.Equal(pids, h.PIDs)) || h.PIDNS != proc.PIDNamespace() {
			ch = rewrite
		}
		if len(pids) > 0 {
			h.PIDs = pids
		}
		if group != nil {
			h.Group = group
		} else if ch == recordOnly {
			return noChange, nil
		}
		h.PIDNS = proc.PIDNamespace()
		return ch, nil
	})
}

// Inspect returns the state of one lock.
func (c *coordinator) Inspect(ctx context.Context, name string) (coord.LockInfo, error) {
	if err := coord.ValidateName(name); err != nil {
		return coord.LockInfo{}, err
	}
	if err := c.ready(ctx); err != nil {
		return coord.LockInfo{}, err
	}
	self, err := selfID()
	if err != nil {
		return coord.LockInfo{}, err
	}
	li, _, err := c.inspectFiles(c.files(name), self)
	if err != nil {
		return li, err
	}
	li.Limit, err = c.limitOf(name)
	return li, err
}

// inspectFiles reads and judges one lock: its info as self sees it, and
// the judgement of its holders.
func (c *coordinator) inspectFiles(f lockFiles, self proc.ID) (coord.LockInfo, lockView, error) {
	st, err := load(f)
	if err != nil {
		return coord.LockInfo{}, lockView{}, err
	}
	now := clock.Now()
	w, err := judgeAll(st, now)
	if err != nil {
		return coord.LockInfo{}, lockView{}, err
	}
	return info(st, w, now, self), w, nil
}

// List returns the locks whose names start with prefix, sorted by name:
// held ones, ones with waiters, and free ones that have issued a token. A
// state file that cannot be trusted makes List fail (naming it).
func (c *coordinator) List(ctx context.Context, prefix string) ([]coord.LockInfo, error) {
	if err := c.ready(ctx); err != nil {
		return nil, err
	}
	self, err := selfID()
	if err != nil {
		return nil, err
	}
	fs, err := c.listLocks(stateSuffix, prefix)
	if err != nil {
		return nil, err
	}
	limits, err := c.readLimits()
	if err != nil {
		return nil, err
	}
	var out []coord.LockInfo
	for _, f := range fs {
		li, _, err := c.inspectFiles(f, self)
		if err != nil {
			return nil, err
		}
		if !strings.HasPrefix(li.Name, prefix) {
			continue
		}
		li.Limit = coordkit.EffectiveLimit(limits, li.Name)
		if li.Held || li.Waiters > 0 || li.LastToken > 0 || li.Limit != nil {
			out = append(out, li)
		}
	}
	out = coordkit.WithLimited(out, limits, prefix)
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// listLocks lists the locks under prefix that have a file with suffix
// (stateSuffix, lockSuffix) in locks/. As it reads the whole directory
// anyway, it removes the stale temporary files it finds (removeStaleTemp).
func (c *coordinator) listLocks(suffix, prefix string) ([]lockFiles, error) {
	ents, err := os.ReadDir(c.locksDir)
	if err != nil {
		return nil, unavailable("read state directory %s: %v", c.locksDir, err)
	}
	var fs []lockFiles
	for _, e := range ents {
		if base, ok := strings.CutSuffix(e.Name(), suffix); ok && !strings.HasPrefix(base, ".") {
			if f, ok := c.filesForBase(base, prefix); ok {
				fs = append(fs, f)
			}
		} else if isTempName(e.Name()) {
			c.removeStaleTemp(e.Name())
		}
	}
	return fs, nil
}

// filesForBase returns the files of the lock stored under base. For a
// hashed base the name is read from the file (and checked by load); ok is
// false for a file fence cannot have written, and for a name not under
// prefix.
func (c *coordinator) filesForBase(base, prefix string) (lockFiles, bool) {
	name, ok := nameFromBase(base)
	switch {
	case !ok:
		return c.filesAt("", base), true
	case !strings.HasPrefix(name, prefix) || coord.ValidateName(name) != nil || fileBase(name) != base:
		return lockFiles{}, false
	}
	return c.files(name), true
}
