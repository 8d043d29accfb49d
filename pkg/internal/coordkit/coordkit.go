// Package coordkit holds what the coordinator backends (pkg/coord/local,
// pkg/coord/etcd, pkg/coord/postgres) and the packages built on them share
// beyond the coord API: the check of an Acquire's arguments, the limit
// that binds a lock, the errors of a limited or mismatched acquisition,
// the check and the times of a completion record.
// Nothing of it is part of the library's API.
package coordkit

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/fence-dev/fence/pkg/coord"
)

// defaultTTL is the TTL of a lease asked for with a zero
// AcquireOptions.TTL: fence run's default --ttl.
const defaultTTL = 15 * time.Second

// CheckAcquire checks the arguments of an Acquire by the rules of
// coord.AcquireOptions, each refusal an error wrapping coord.ErrInvalid, and
// returns the options with their defaults: a zero TTL is 15s, an empty
// Holder coord.DefaultHolder(). Every backend calls it first, so that they
// refuse the same input.
func CheckAcquire(name string, o coord.AcquireOptions) (coord.AcquireOptions, error) {
	if err := coord.ValidateName(name); err != nil {
		return o, err
	}
	if o.TTL == 0 {
		o.TTL = defaultTTL
	}
	if err := coord.ValidateTTL(o.TTL); err != nil {
		return o, err
	}
	if o.Wait < 0 && o.Wait != coord.WaitForever {
		return o, fmt.Errorf("%w: wait %v is negative (WaitForever waits until acquired)", coord.ErrInvalid, o.Wait)
	}
	if err := coord.ValidateHolder(o.Holder); err != nil {
		return o, err
	}
	if o.Holder == "" {
		o.Holder = coord.DefaultHolder()
	}
	if o.Process != nil {
		if err := ValidateProcess(*o.Process); err != nil {
			return o, err
		}
	}
	if o.Slots < 0 || o.Slots > coord.MaxSlots {
		return o, fmt.Errorf("%w: slots %d is out of range (1 to %d)", coord.ErrInvalid, o.Slots, coord.MaxSlots)
	}
	return o, nil
}

// ValidateProcess checks p: every PID positive, the process group 0 (not
// known yet) or another process's than init's. The error wraps
// coord.ErrInvalid.
func ValidateProcess(p coord.ProcessInfo) error {
	for _, pid := range p.PIDs {
		if pid <= 0 {
			return fmt.Errorf("%w: process id %d", coord.ErrInvalid, pid)
		}
	}
	if p.PGID < 0 || p.PGID == 1 {
		return fmt.Errorf("%w: process group %d", coord.ErrInvalid, p.PGID)
	}
	return nil
}

// CheckOnce checks the arguments of a call on the completion record of
// (lock, key) kept for keep (0 where nothing is written), each refusal an
// error wrapping coord.ErrInvalid.
func CheckOnce(lock, key string, keep time.Duration) error {
	if err := coord.ValidateName(lock); err != nil {
		return err
	}
	if err := coord.ValidateKey(key); err != nil {
		return err
	}
	return coord.ValidateKeep(keep)
}

// Stamp returns rec as written now to be kept for keep (0:
// coord.DefaultKeep), and that retention: Finished is now when unset, and
// Expires is keep from now (the retention counts from the write, also for
// a record marked for a run long past). The backends drop the record then.
func Stamp(rec coord.Completion, keep time.Duration) (coord.Completion, time.Duration) {
	if keep == 0 {
		keep = coord.DefaultKeep
	}
	now := time.Now()
	if rec.Finished.IsZero() {
		rec.Finished = now
	}
	rec.Expires = now.Add(keep)
	return rec, keep
}

// SlotsOf is the number of slots a LockInfo or AcquireOptions value n
// means: 0 is 1 (a lock).
func SlotsOf(n int) int { return max(n, 1) }

// HeldBy returns the live holder of i with token, if any.
func HeldBy(i coord.LockInfo, token uint64) (coord.HolderInfo, bool) {
	for _, h := range i.AllHolders() {
		if h.Token == token {
			return h, true
		}
	}
	return coord.HolderInfo{}, false
}

// ManyHolders is the coord.ErrInvalid error of a call that names no token
// on a lock with several holders (Revoke, RequestStop or RevokeToken with
// token 0): it lists their tokens, one of which the caller must name.
func ManyHolders(i coord.LockInfo) error {
	hs := i.AllHolders()
	toks := make([]string, len(hs))
	for k, h := range hs {
		toks[k] = fmt.Sprint(h.Token)
	}
	return fmt.Errorf("%w: lock %q has %d holders (tokens %s): name one with its token", coord.ErrInvalid, i.Name, len(hs), strings.Join(toks, ", "))
}

// SlotsError is the error of an Acquire whose Slots differ from those the
// lock records while it has holders or waiters. It is coord.ErrInvalid.
type SlotsError struct {
	Lock string
	Have int // the slots the lock records
	Want int // the slots asked for
}

func (e *SlotsError) Error() string {
	return fmt.Sprintf("%v: lock %q has %s while it has holders or waiters; this caller asked for %s: the holders and waiters of a lock share one --slots (an idle lock takes its next caller's)",
		coord.ErrInvalid, e.Lock, slotsPhrase(e.Have), slotsPhrase(e.Want))
}

func slotsPhrase(n int) string {
	if n <= 1 {
		return "--slots 1, a plain lock"
	}
	return fmt.Sprintf("--slots %d", n)
}

// Is makes a SlotsError coord.ErrInvalid.
func (e *SlotsError) Is(target error) bool { return target == coord.ErrInvalid }

// LimitError is the error of an Acquire that did not wait on a lock held
// back by an operator limit (fence freeze, fence limit). It is
// coord.ErrBusy.
type LimitError struct {
	Lock    string
	Limit   coord.Limit
	Holders int // the lock's holders as of the refusal
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("%v: lock %q is %s", coord.ErrBusy, e.Lock, e.Limit.Describe())
}

// Is makes a LimitError coord.ErrBusy.
func (e *LimitError) Is(target error) bool { return target == coord.ErrBusy }

// Allows reports whether a lock held by holders may grant one more lease
// under the limit l (nil: no limit).
func Allows(l *coord.Limit, holders int) bool { return l == nil || holders < l.Max }

// covers reports whether the limit applies to lock name.
func covers(l coord.Limit, name string) bool {
	if l.Prefix {
		return strings.HasPrefix(name, l.Name)
	}
	return l.Name == name
}

// EffectiveLimit returns the limit that binds lock name among ls: of those
// that cover it, the one with the smallest Max (the lock's own first, then
// the longest prefix, on a tie), or nil when none covers it.
func EffectiveLimit(ls []coord.Limit, name string) *coord.Limit {
	var best *coord.Limit
	for i := range ls {
		l := &ls[i]
		if !covers(*l, name) {
			continue
		}
		if best == nil || l.Max < best.Max || l.Max == best.Max && more(l, best) {
			best = l
		}
	}
	if best == nil {
		return nil
	}
	b := *best
	return &b
}

// more reports whether a is more specific than b.
func more(a, b *coord.Limit) bool {
	if a.Prefix != b.Prefix {
		return !a.Prefix
	}
	return len(a.Name) > len(b.Name)
}

// WithLimited adds to infos, a listing of the locks under prefix, a free
// entry for each lock of its own limit under prefix that infos lack (a
// lock frozen before it was ever used), so that listings show it.
func WithLimited(infos []coord.LockInfo, ls []coord.Limit, prefix string) []coord.LockInfo {
	for _, l := range ls {
		if l.Prefix || !strings.HasPrefix(l.Name, prefix) {
			continue
		}
		if slices.ContainsFunc(infos, func(i coord.LockInfo) bool { return i.Name == l.Name }) {
			continue
		}
		infos = append(infos, coord.LockInfo{Name: l.Name, Limit: EffectiveLimit(ls, l.Name)})
	}
	return infos
}

// SetHolders sets hs on i (oldest first) as the holders of a lock of slots
// slots: the top-level holder fields describe the oldest, Holders lists
// them all when slots > 1. Held is whether there is any.
func SetHolders(i *coord.LockInfo, slots int, hs []coord.HolderInfo) {
	if slots > 1 {
		i.Slots = slots
		i.Holders = hs
	}
	i.Held = len(hs) > 0
	if !i.Held {
		return
	}
	h := hs[0]
	i.Holder, i.Token, i.LeaseID, i.TTL, i.TTLLeft, i.AcquiredAt, i.Process =
		h.Holder, h.Token, h.LeaseID, h.TTL, h.TTLLeft, h.AcquiredAt, h.Process
}
