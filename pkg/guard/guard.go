// Package guard is the storage side of fencing: a store that accepts a write
// only when its fencing token is at least the largest token it has accepted
// for the same key, so that a lease holder that was paused past its lease
// cannot overwrite the work of its successor.
//
// A Guard compares and writes in one atomic step. Implementations:
//
//   - package localstore: files under a state directory (the local backend's
//     `fence guard` store);
//   - package etcdstore: one etcd transaction per write (the etcd backend's
//     `fence guard` store);
//   - package pgstore: a table in the PostgreSQL backend's schema, written
//     by sqlguard's fenced upsert (the PostgreSQL backend's store);
//   - package sqlguard: a key/value table on database/sql (PostgreSQL,
//     SQLite), plus the fenced UPDATE and upsert forms for tables of your own.
//
// The rule is "token >= accepted", not ">": one holder writes many times with
// the same token, and a retried write must not fail. See docs/fencing.md.
package guard

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/internal/printable"
)

// Guard is a store of fenced values, one per key. Implementations are safe
// for concurrent use.
type Guard interface {
	// Put stores value under key when token is at least the largest token
	// accepted for key so far (any token for a new key), comparing and
	// writing in one atomic step. A smaller token is refused with a
	// *StaleError (errors.Is(err, ErrStale)) and changes nothing. An invalid
	// key or token gives an error wrapping coord.ErrInvalid.
	Put(ctx context.Context, key string, token uint64, value []byte) error
	// Get returns the value last accepted for key, or an error wrapping
	// ErrNotFound when nothing was ever accepted for it.
	Get(ctx context.Context, key string) (Value, error)
}

// Value is a stored value with the token that wrote it.
type Value struct {
	// Data is the value as written (nil or empty for an empty value).
	Data []byte `json:"data"`
	// Token is the fencing token of the write that stored Data: the largest
	// token accepted for the key.
	Token uint64 `json:"token"`
	// UpdatedAt is the writer's wall-clock time of that write, for display
	// (zero when the store does not record it).
	UpdatedAt time.Time `json:"updated_at"`
}

var (
	// ErrStale is matched (errors.Is) by the error of a write refused because
	// a larger token was already accepted for its key. The error itself is a
	// *StaleError. The CLI maps it to exit code 77.
	ErrStale = errors.New("stale fencing token")
	// ErrNotFound: no value was ever accepted for the key (or, for a fenced
	// UPDATE, the row does not exist).
	ErrNotFound = errors.New("guard key not found")
)

// StaleError is the error of a refused write: Token was smaller than
// Accepted, the largest token already accepted for Key.
type StaleError struct {
	Key      string
	Token    uint64 // the refused token
	Accepted uint64 // the largest token accepted for Key when the write was refused
}

func (e *StaleError) Error() string {
	return fmt.Sprintf("stale fencing token %d for key %q: token %d was already accepted", e.Token, e.Key, e.Accepted)
}

// Is reports whether target is ErrStale, so that errors.Is(err, ErrStale)
// holds for a *StaleError.
func (e *StaleError) Is(target error) bool { return target == ErrStale }

// ValidateKey checks a key by the rules of lock names (coord.ValidateName:
// the same check, not a copy): 1 to coord.MaxNameLen bytes of printable UTF-8, no
// control characters, no invisible or private-use characters. `/` is
// allowed and has no nesting meaning. The error wraps coord.ErrInvalid.
func ValidateKey(key string) error {
	if err := printable.Check("guard key", key, coord.MaxNameLen); err != nil {
		return fmt.Errorf("%w: %v", coord.ErrInvalid, err)
	}
	return nil
}
