package history

import "time"

// Kind names a recorded lock event.
type Kind string

const (
	Acquired         Kind = "acquired"          // Token, Holder, Wait, LeaseID
	Released         Kind = "released"          // Token, Holder, HeldFor
	RenewalFailed    Kind = "renewal_failed"    // Token, Holder, Count, Error
	LeaseLost        Kind = "lease_lost"        // Token, Holder: the command was stopped
	DeadlineExceeded Kind = "deadline_exceeded" // Token, Holder: the command was stopped
	Expired          Kind = "expired"           // Token, Holder, LeaseID: ended without a release or revoke
	Revoked          Kind = "revoked"           // Token, Holder
	StaleRefused     Kind = "stale_refused"     // Key, Token (refused), AcceptedToken
	// Package shards (fence shards run), on a shard's lock: Holder (the
	// member), Token, Reason.
	ShardTaken   Kind = "shard_taken"
	ShardGivenUp Kind = "shard_given_up" // the map moved it to another member
	ShardLost    Kind = "shard_lost"     // its lease ended
	// On a member's lock: Holder (the member), Count (restarts so far),
	// Reason.
	Restarted Kind = "restarted"
	Completed Kind = "completed" // Key, Token, Holder: a --once job succeeded and was recorded
	Skipped   Kind = "skipped"   // Key, Holder, AcceptedToken (the record's): a --once job was already done
	// The kill switch (coord.Coordinator.SetLimit), on each lock it covers: Holder (who
	// set it), Reason (the operator's, after the prefix for a prefix's
	// limit).
	Frozen  Kind = "frozen"  // fence freeze: no new holder
	Limited Kind = "limited" // fence limit: Count is the limit
	Thawed  Kind = "thawed"  // fence thaw: the limit was removed
)

// Event is one entry of a lock's persistent history. Its JSON form, the
// durations in nanoseconds, is the one the stores and the spool keep.
type Event struct {
	Time          time.Time     `json:"time"`
	Lock          string        `json:"lock"`
	Kind          Kind          `json:"kind"`
	Holder        string        `json:"holder,omitempty"`
	Token         uint64        `json:"token,omitempty"`
	Wait          time.Duration `json:"wait_ns,omitempty"`
	HeldFor       time.Duration `json:"held_for_ns,omitempty"`
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
