package coord

import (
	"fmt"
	"strings"
	"time"
)

// Slots: a lock taken with AcquireOptions.Slots N > 1 is a semaphore: up to
// N holders at once, each in a slot (0..N-1, the lowest free one at its
// grant) and each with its own fencing token, strictly greater than every
// token issued before for the lock (tokens are per lock, never per slot).
// Waiters are served first come, first served, as for a lock.
//
// The lock records N while it has holders or waiters: an Acquire with
// another N fails with a *SlotsError (ErrInvalid) and does not queue; an
// idle lock takes the N of its next caller. An operator limit (SetLimit)
// caps the holders below N.

// MaxSlots is the largest AcquireOptions.Slots.
const MaxSlots = 1024

// HolderInfo is one holder of a lock (LockInfo.Holders).
type HolderInfo struct {
	// Slot is the holder's slot, 0..Slots-1.
	Slot       int           `json:"slot"`
	Holder     string        `json:"holder"`
	Token      uint64        `json:"token"`
	LeaseID    string        `json:"lease_id,omitempty"`
	TTL        time.Duration `json:"-"` // granted TTL
	TTLLeft    time.Duration `json:"-"` // time left before expiry, as of the read
	AcquiredAt time.Time     `json:"acquired_at,omitempty"`
	// Process is set for a local lease attached to processes.
	Process *ProcessInfo `json:"process,omitempty"`
}

// SlotsOf is the number of slots a LockInfo or AcquireOptions value n
// means: 0 is 1 (a lock).
func SlotsOf(n int) int { return max(n, 1) }

// AllHolders returns the lock's holders, oldest (smallest token) first:
// Holders for a semaphore, else the one holder of the top-level fields
// (slot 0), or none when the lock is free.
func (i LockInfo) AllHolders() []HolderInfo {
	if len(i.Holders) > 0 {
		return i.Holders
	}
	if !i.Held {
		return nil
	}
	return []HolderInfo{{Holder: i.Holder, Token: i.Token, LeaseID: i.LeaseID, TTL: i.TTL, TTLLeft: i.TTLLeft,
		AcquiredAt: i.AcquiredAt, Process: i.Process}}
}

// HeldBy returns the live holder with token, if any.
func (i LockInfo) HeldBy(token uint64) (HolderInfo, bool) {
	for _, h := range i.AllHolders() {
		if h.Token == token {
			return h, true
		}
	}
	return HolderInfo{}, false
}

// SetHolders sets hs (oldest first) as the holders of a lock of slots
// slots: the top-level holder fields describe the oldest, Holders lists
// them all when slots > 1. Held is whether there is any.
func (i *LockInfo) SetHolders(slots int, hs []HolderInfo) {
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

// SlotsError is the error of an Acquire whose Slots differ from those the
// lock records while it has holders or waiters. It is ErrInvalid.
type SlotsError struct {
	Lock string
	Have int // the slots the lock records
	Want int // the slots asked for
}

func (e *SlotsError) Error() string {
	return fmt.Sprintf("%v: lock %q has %s while it has holders or waiters; this caller asked for %s: the holders and waiters of a lock share one --slots (an idle lock takes its next caller's)",
		ErrInvalid, e.Lock, slotsPhrase(e.Have), slotsPhrase(e.Want))
}

func slotsPhrase(n int) string {
	if n <= 1 {
		return "--slots 1, a plain lock"
	}
	return fmt.Sprintf("--slots %d", n)
}

// Is makes a SlotsError ErrInvalid.
func (e *SlotsError) Is(target error) bool { return target == ErrInvalid }

// ManyHolders is the ErrInvalid error of a call that names no token on a
// lock with several holders (Revoke, RequestStop or RevokeToken with token 0): it lists
// their tokens, one of which the caller must name.
func ManyHolders(i LockInfo) error {
	hs := i.AllHolders()
	toks := make([]string, len(hs))
	for k, h := range hs {
		toks[k] = fmt.Sprint(h.Token)
	}
	return fmt.Errorf("%w: lock %q has %d holders (tokens %s): name one with its token", ErrInvalid, i.Name, len(hs), strings.Join(toks, ", "))
}
