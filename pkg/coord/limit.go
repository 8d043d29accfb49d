package coord

import (
	"fmt"
	"strings"
	"time"

	"github.com/fence-dev/fence/pkg/internal/printable"
)

// MaxLimit is the largest Max of a Limit.
const MaxLimit = 1 << 20

// maxReasonLen bounds Limit.Reason and Limit.By, in bytes.
const maxReasonLen = 1024

// Limit is an operator's cap on the holders of a lock, or of every lock
// whose name starts with a prefix, also locks that do not exist yet: the
// kill switch (fence limit, fence freeze, fence thaw). Max 0 is a freeze,
// Max 1 safe serial processing. Where several limits cover a lock, the
// smallest Max binds (the lock's own first, then the longest prefix, on a
// tie). A limit persists until it is cleared and binds every grant (see
// Coordinator.SetLimit); waiters keep their place in the queue and
// proceed, in order, when it allows.
type Limit struct {
	// Name is the lock's name, or the prefix when Prefix is set.
	Name string `json:"name"`
	// Prefix: the limit covers every lock whose name starts with Name
	// ("" covers every lock).
	Prefix bool `json:"prefix,omitempty"`
	// Max is the most holders the lock may have; 0 is frozen: no new
	// holder.
	Max int `json:"max"`
	// Reason is the operator's reason, in words (may be empty).
	Reason string `json:"reason,omitempty"`
	// By is who set the limit ("user@host").
	By string `json:"by,omitempty"`
	// At is when the limit was set.
	At time.Time `json:"at"`
}

// Scope describes what the limit covers, for messages: `lock "a"`,
// `prefix "backups/"`.
func (l Limit) Scope() string {
	if l.Prefix {
		return fmt.Sprintf("prefix %q", l.Name)
	}
	return fmt.Sprintf("lock %q", l.Name)
}

// Describe says what the limit does, by whom, since when and why, for
// messages: `frozen by alice@db1 at 2026-12-01T10:00:00Z (prefix "b/"):
// disk full`.
func (l Limit) Describe() string {
	var b strings.Builder
	if l.Max == 0 {
		b.WriteString("frozen")
	} else {
		fmt.Fprintf(&b, "limited to %d holder(s)", l.Max)
	}
	if l.By != "" {
		fmt.Fprintf(&b, " by %s", l.By)
	}
	if !l.At.IsZero() {
		fmt.Fprintf(&b, " at %s", l.At.UTC().Format(time.RFC3339))
	}
	if l.Prefix {
		fmt.Fprintf(&b, " (%s)", l.Scope())
	}
	if l.Reason != "" {
		fmt.Fprintf(&b, ": %s", l.Reason)
	}
	return b.String()
}

// ValidateLimit checks a limit before it is stored: a valid lock name (a
// prefix may be empty, and is otherwise checked as a name), Max between 0
// and MaxLimit, a printable Reason and By of at most maxReasonLen bytes.
// The error wraps ErrInvalid.
func ValidateLimit(l Limit) error {
	if !l.Prefix || l.Name != "" {
		what := "lock name"
		if l.Prefix {
			what = "prefix"
		}
		if err := printable.Check(what, l.Name, MaxNameLen); err != nil {
			return invalid(err)
		}
	}
	if l.Max < 0 || l.Max > MaxLimit {
		return fmt.Errorf("%w: limit %d is out of range (0 to %d)", ErrInvalid, l.Max, MaxLimit)
	}
	if l.Reason != "" {
		if err := printable.Check("reason", l.Reason, maxReasonLen); err != nil {
			return invalid(err)
		}
	}
	if l.By != "" {
		if err := printable.Check("limit setter", l.By, maxReasonLen); err != nil {
			return invalid(err)
		}
	}
	return nil
}
