package coord

import (
	"fmt"
	"os"
	"os/user"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fence-dev/fence/pkg/internal/printable"
)

// Limits: the kill switch (fence limit, fence freeze, fence thaw).
//
// An operator limit caps the holders of a lock: Max 0 is a freeze (no new
// holder), Max 1 safe serial processing. A limit is set on one lock, or on
// a prefix, where it covers every lock whose name starts with it, also
// locks that do not exist yet. Where several limits cover a lock, the
// smallest Max binds (EffectiveLimit). A limit persists until it is cleared
// (thaw). It is checked by the coordinator atomically with every grant:
// once SetLimit has returned, no grant exceeds it. Holders above a new
// limit keep their leases (the caller revokes them if it wants to); waiters
// keep their place in the queue and proceed, in order, when the limit
// allows. An Acquire that does not wait on a lock held back by its limit
// fails with a *LimitError, which is ErrBusy.

// MaxLimit is the largest Max of a Limit.
const MaxLimit = 1 << 20

// maxReasonLen bounds Limit.Reason and Limit.By, in bytes.
const maxReasonLen = 1024

// Limit is an operator's cap on the holders of a lock or of every lock
// under a prefix.
type Limit struct {
	// Name is the lock's name, or the prefix when Prefix is set.
	Name string `json:"name"`
	// Prefix: the limit covers every lock whose name starts with Name
	// ("" covers every lock).
	Prefix bool `json:"prefix,omitempty"`
	// Max is the most holders the lock may have; 0 is frozen.
	Max int `json:"max"`
	// Reason is the operator's reason, in words (may be empty).
	Reason string `json:"reason,omitempty"`
	// By is who set the limit ("user@host").
	By string `json:"by,omitempty"`
	// At is when the limit was set.
	At time.Time `json:"at"`
}

// DefaultSetter is who sets a limit when the caller names nobody, the
// Limit.By that fence limit, freeze and thaw and the dashboard record:
// "USER@HOSTNAME" (the uid when the user has no name).
func DefaultSetter() string {
	name := os.Getenv("USER")
	if u, err := user.Current(); err == nil && u.Username != "" {
		name = u.Username
	}
	if name == "" {
		name = strconv.Itoa(os.Getuid())
	}
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "localhost"
	}
	return name + "@" + host
}

// Frozen reports whether the limit lets no new holder in.
func (l Limit) Frozen() bool { return l.Max == 0 }

// covers reports whether the limit applies to lock name.
func (l Limit) covers(name string) bool {
	if l.Prefix {
		return strings.HasPrefix(name, l.Name)
	}
	return l.Name == name
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
	if l.Frozen() {
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

// Allows reports whether a lock held by holders may grant one more lease
// under the limit l (nil: no limit).
func (l *Limit) Allows(holders int) bool { return l == nil || holders < l.Max }

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

// EffectiveLimit returns the limit that binds lock name among ls: of those
// that cover it, the one with the smallest Max (the lock's own first, then
// the longest prefix, on a tie), or nil when none covers it.
func EffectiveLimit(ls []Limit, name string) *Limit {
	var best *Limit
	for i := range ls {
		l := &ls[i]
		if !l.covers(name) {
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
func more(a, b *Limit) bool {
	if a.Prefix != b.Prefix {
		return !a.Prefix
	}
	return len(a.Name) > len(b.Name)
}

// LimitError is the error of an Acquire that did not wait on a lock held
// back by an operator limit (fence freeze, fence limit). It is ErrBusy.
type LimitError struct {
	Lock    string
	Limit   Limit
	Holders int // the lock's holders as of the refusal
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("%v: lock %q is %s", ErrBusy, e.Lock, e.Limit.Describe())
}

// Is makes a LimitError ErrBusy.
func (e *LimitError) Is(target error) bool { return target == ErrBusy }

// WithLimited adds to infos, a listing of the locks under prefix, a free
// entry for each lock of its own limit under prefix that infos lack (a
// lock frozen before it was ever used), so that listings show it.
func WithLimited(infos []LockInfo, ls []Limit, prefix string) []LockInfo {
	for _, l := range ls {
		if l.Prefix || !strings.HasPrefix(l.Name, prefix) {
			continue
		}
		if slices.ContainsFunc(infos, func(i LockInfo) bool { return i.Name == l.Name }) {
			continue
		}
		infos = append(infos, LockInfo{Name: l.Name, Limit: EffectiveLimit(ls, l.Name)})
	}
	return infos
}
