package coord

import (
	"time"
)

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
