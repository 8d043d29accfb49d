package coord

import (
	"context"
	"time"
)

// HistoryKind names a recorded lock event.
type HistoryKind string

const (
	HistAcquired         HistoryKind = "acquired"          // Token, Holder, Wait, LeaseID
	HistReleased         HistoryKind = "released"          // Token, Holder, HeldFor
	HistRenewalFailed    HistoryKind = "renewal_failed"    // Token, Holder, Count, Error
	HistLeaseLost        HistoryKind = "lease_lost"        // Token, Holder: the command was stopped
	HistDeadlineExceeded HistoryKind = "deadline_exceeded" // Token, Holder: the command was stopped
	HistExpired          HistoryKind = "expired"           // Token, Holder, LeaseID: ended without a release or revoke
	HistRevoked          HistoryKind = "revoked"           // Token, Holder
	HistStaleRefused     HistoryKind = "stale_refused"     // Key, Token (refused), AcceptedToken
	// Package shards (fence shards run), on a shard's lock: Holder (the
	// member), Token, Reason.
	HistShardTaken   HistoryKind = "shard_taken"
	HistShardGivenUp HistoryKind = "shard_given_up" // the map moved it to another member
	HistShardLost    HistoryKind = "shard_lost"     // its lease ended
	// On a member's lock: Holder (the member), Count (restarts so far),
	// Reason.
	HistRestarted HistoryKind = "restarted"
	HistCompleted HistoryKind = "completed" // Key, Token, Holder: a --once job succeeded and was recorded
	HistSkipped   HistoryKind = "skipped"   // Key, Holder, AcceptedToken (the record's): a --once job was already done
	// The kill switch (Limiter), on each lock it covers: Holder (who set
	// it), Reason (the operator's, after the prefix for a prefix's limit).
	HistFrozen  HistoryKind = "frozen"  // fence freeze: no new holder
	HistLimited HistoryKind = "limited" // fence limit: Count is the limit
	HistThawed  HistoryKind = "thawed"  // fence thaw: the limit was removed
)

// HistoryEvent is one entry of a lock's persistent history.
type HistoryEvent struct {
	Time          time.Time     `json:"time"`
	Lock          string        `json:"lock"`
	Kind          HistoryKind   `json:"kind"`
	Holder        string        `json:"holder,omitempty"`
	Token         uint64        `json:"token,omitempty"`
	Wait          time.Duration `json:"-"`
	HeldFor       time.Duration `json:"-"`
	Count         int           `json:"count,omitempty"`
	Error         string        `json:"error,omitempty"`
	Key           string        `json:"key,omitempty"`
	AcceptedToken uint64        `json:"accepted_token,omitempty"`
	// LeaseID is the lease of an acquired or expired event (empty in
	// events recorded before fence kept it): a Release from another
	// process finds by it that the lease it releases had lapsed.
	LeaseID string `json:"lease_id,omitempty"`
	// Reason says why, in words: why a shard moved (package shards).
	Reason string `json:"reason,omitempty"`
}

// Historian is implemented by coordinators that keep a bounded, persistent
// history of events per lock.
type Historian interface {
	// Record appends an event to the lock's history.
	Record(ctx context.Context, ev HistoryEvent) error
	// History returns the lock's most recent events, oldest first, at most
	// limit of them (0: all that are kept).
	History(ctx context.Context, lock string, limit int) ([]HistoryEvent, error)
}
