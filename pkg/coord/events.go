package coord

import (
	"context"
	"time"
)

// HistoryKind names a recorded lock event.
type HistoryKind string

const (
	HistAcquired         HistoryKind = "acquired"          // Token, Holder, Wait
	HistReleased         HistoryKind = "released"          // Token, Holder, HeldFor
	HistRenewalFailed    HistoryKind = "renewal_failed"    // Token, Holder, Count, Error
	HistLeaseLost        HistoryKind = "lease_lost"        // Token, Holder: the command was stopped
	HistDeadlineExceeded HistoryKind = "deadline_exceeded" // Token, Holder: the command was stopped
	HistExpired          HistoryKind = "expired"           // Token, Holder: taken over after expiry
	HistRevoked          HistoryKind = "revoked"           // Token, Holder
	HistStaleRefused     HistoryKind = "stale_refused"     // Key, Token (refused), AcceptedToken
	HistCompleted        HistoryKind = "completed"         // Key, Token, Holder: a --once job succeeded and was recorded
	HistSkipped          HistoryKind = "skipped"           // Key, Holder, AcceptedToken (the record's): a --once job was already done
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
