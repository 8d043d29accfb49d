// Package history keeps a bounded, persistent history of events per lock:
// acquisitions, releases, expiries, revocations, renewal failures, lost
// leases, deadlines and stale tokens refused by a guard. It is what
// `fence history`, `fence show`, the dashboard and the exporter read.
//
// Import it for the event types (Event and its Kind), for Store, what keeps
// them, and for Wrap, a coordinator that records the lease events of the one
// it decorates (Recorder).
//
// Three Store implementations sit beside the coordinator backends, sharing
// their storage but none of their internals:
//
//   - package localstore: one append-only file per lock under
//     <state-dir>/history/;
//   - package etcdstore: one key per event under <prefix>history/;
//   - package pgstore: one row per event in the PostgreSQL backend's schema.
//
// They are bounded by count per lock (1000 events) and by age (7 days),
// enforced when they are written, so that storage never grows without
// limit; reads never return an event beyond either bound.
//
// Package auto (internal/history/auto) picks the store that belongs to a
// coordinator. What a Recorder records, and what it does when a write
// fails: see Recorder.
package history

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/fence-dev/fence/pkg/coord"
	hopts "github.com/fence-dev/fence/pkg/history/internal/opts"
)

// Store keeps the history of every lock. Implementations are safe for
// concurrent use, and, for the ones in this module, by many processes. A
// coordinator that keeps a history (a Recorder) is one too: find out with a
// type assertion, c.(history.Store).
type Store interface {
	// Record appends an event to the lock's history.
	Record(ctx context.Context, ev Event) error
	// History returns the lock's most recent events, oldest first, at most
	// limit of them (0: all that are kept).
	History(ctx context.Context, lock string, limit int) ([]Event, error)
	// Append records events in the order given. Events of one lock are
	// written in one step where the backend can; an error may leave a
	// prefix of the events of other locks written.
	Append(ctx context.Context, evs []Event) error
	// Since returns the kept events of lock whose sequence number is
	// greater than after, oldest first: the incremental read of followers
	// such as the exporter that count events as they arrive.
	Since(ctx context.Context, lock string, after uint64) ([]Entry, error)
	// Heads returns every lock that has a history, sorted by name, with the
	// sequence number of its latest event.
	Heads(ctx context.Context) ([]Head, error)
}

// releaseAppender is a Store that can write a released event in one step
// with the release itself, on a coordinator of its own backend (packages
// etcdstore and localstore): the event is on record before the next
// holder's turn, and the release costs no read of the lock beforehand (on
// etcd, one round trip instead of a read, a write and the release). The
// Recorder uses it for the leases it acquired.
type releaseAppender interface {
	// AppendRelease writes ev, the released event of lease leaseID held
	// under token on lock ev.Lock, and releases that lease on c, at once
	// and only while the lease holds the lock. done false: nothing was
	// written or released (c is not such a coordinator, the lease no longer
	// holds the lock, or the write failed, with err), and the caller
	// records and releases the usual way. An error with done true is the
	// release's: the event is written.
	AppendRelease(ctx context.Context, c coord.Coordinator, leaseID string, token uint64, ev Event) (done bool, err error)
}

// Entry is a recorded event with its sequence number. Sequence numbers of a
// lock start at 1 and grow by one per event written, in the order the store
// wrote them (which is also the order History returns). They survive
// trimming; they start again only if the lock's history is removed by hand.
type Entry struct {
	Seq   uint64
	Event Event
}

// Head is the sequence number of the latest event of a lock's history.
type Head struct {
	Lock string
	Seq  uint64
}

// Option is a setting of the Recorder (WithLogger, WithSpool); the stores
// take the same options.
type Option = hopts.Option

// WithLogger sets the logger of the Recorder.
func WithLogger(l *slog.Logger) Option { return func(o *hopts.Options) { o.Logger = l } }

// maxLeaseIDLen bounds an event's lease id (etcd's are at most 16 hex
// digits, the local backend's 24).
const maxLeaseIDLen = 256

// knownKinds are the event kinds a store accepts.
var knownKinds = map[Kind]bool{
	Acquired: true, Released: true, RenewalFailed: true,
	LeaseLost: true, DeadlineExceeded: true, Expired: true,
	Revoked: true, StaleRefused: true,
	ShardTaken: true, ShardGivenUp: true, ShardLost: true, Restarted: true,
	Completed: true,
	Skipped:   true,
	Frozen:    true, Limited: true, Thawed: true,
}

// Normalize checks an event before it is stored and fills in what may be
// left out: a zero Time becomes now (in UTC, as every stored time), Holder,
// Error and Reason are cut to 1 KiB at a UTF-8 boundary (hopts.MaxTextLen).
// An event without a valid lock name, with an unknown kind, a bad guard
// key, a negative duration or count, or a token above coord.MaxToken is
// refused with an error wrapping coord.ErrInvalid.
func Normalize(ev Event, now time.Time) (Event, error) {
	if err := coord.ValidateName(ev.Lock); err != nil {
		return ev, fmt.Errorf("history event: %w", err)
	}
	if !knownKinds[ev.Kind] {
		return ev, fmt.Errorf("%w: history event for %q: unknown kind %q", coord.ErrInvalid, ev.Lock, ev.Kind)
	}
	if ev.Key != "" {
		if err := coord.ValidateName(ev.Key); err != nil {
			return ev, fmt.Errorf("%w: history event for %q: bad guard key %q", coord.ErrInvalid, ev.Lock, ev.Key)
		}
	}
	if len(ev.LeaseID) > maxLeaseIDLen || strings.ContainsFunc(ev.LeaseID, unicode.IsControl) || !utf8.ValidString(ev.LeaseID) {
		return ev, fmt.Errorf("%w: history event for %q: bad lease id %q", coord.ErrInvalid, ev.Lock, ev.LeaseID)
	}
	if ev.Token > coord.MaxToken || ev.AcceptedToken > coord.MaxToken {
		return ev, fmt.Errorf("%w: history event for %q: token above %d", coord.ErrInvalid, ev.Lock, uint64(coord.MaxToken))
	}
	if ev.Wait < 0 || ev.HeldFor < 0 || ev.Count < 0 {
		return ev, fmt.Errorf("%w: history event for %q: negative wait, held-for or count", coord.ErrInvalid, ev.Lock)
	}
	if ev.Time.IsZero() {
		ev.Time = now
	}
	ev.Time = ev.Time.UTC().Round(0)
	ev.Holder = cut(ev.Holder)
	ev.Error = cut(ev.Error)
	ev.Reason = cut(ev.Reason)
	return ev, nil
}

// cut shortens s to at most hopts.MaxTextLen bytes without splitting a rune.
func cut(s string) string {
	if len(s) <= hopts.MaxTextLen {
		return s
	}
	const ell = "…"
	s = s[:hopts.MaxTextLen-len(ell)]
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return strings.TrimRight(s, " ") + ell
}
