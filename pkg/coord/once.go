package coord

import (
	"fmt"
	"time"
)

// DefaultKeep is how long a completion record is kept when no retention is
// given: 30 days.
const DefaultKeep = 30 * 24 * time.Hour

// maxKeep is the longest retention of a completion record (10 years).
const maxKeep = 10 * 366 * 24 * time.Hour

// Completion is the record that a job ran to success for a key of a lock
// (`fence run LOCK --once KEY`): at most one per (Lock, Key).
type Completion struct {
	Lock string `json:"lock"`
	Key  string `json:"key"`
	// Holder and Token are those of the lease the job ran under (Token 0
	// for a record marked by hand).
	Holder string `json:"holder,omitempty"`
	Token  uint64 `json:"token,omitempty"`
	// Started and Finished are the job's wall-clock start and end.
	Started  time.Time `json:"started"`
	Finished time.Time `json:"finished"`
	// Expires is when the record is dropped (Finished plus the retention
	// it was written with).
	Expires time.Time `json:"expires"`
}

// ValidateKey checks a completion key: the rules of a lock name (1 to 256
// bytes of printable UTF-8). The error wraps ErrInvalid.
func ValidateKey(key string) error {
	if key == "" {
		return fmt.Errorf("%w: once key is empty", ErrInvalid)
	}
	if err := ValidateName(key); err != nil {
		return fmt.Errorf("%w: once key %q is not valid (1 to %d bytes of printable UTF-8)", ErrInvalid, key, MaxNameLen)
	}
	return nil
}

// ValidateKeep checks a retention: at least a second, at most maxKeep (0
// means DefaultKeep). The error wraps ErrInvalid.
func ValidateKeep(keep time.Duration) error {
	if keep != 0 && (keep < time.Second || keep > maxKeep) {
		return fmt.Errorf("%w: once retention %v must be between 1s and %v", ErrInvalid, keep, maxKeep)
	}
	return nil
}
