package coord

import (
	"time"
)

// Slots: a lock taken with AcquireOptions.Slots N > 1 is a semaphore: up to
// N holders at once, each in a slot (0..N-1, the lowest free one at its
// grant) and each with its own fencing token, strictly greater than every
// token issued before for the lock (tokens are per lock, never per slot).
// Waiters are served first come, first served, as for a lock.
//
// The lock records N while it has holders or waiters: an Acquire with
// another N fails with an error wrapping ErrInvalid and does not queue; an
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
