// Package store keeps the dashboard's rows, one per lock, sorted and
// filtered (see Store). It does no I/O and is not safe for concurrent use:
// the Bubble Tea model owns it and changes it in Update.
package store

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fence-dev/fence/pkg/coord"
)

// State is what the dashboard says about a lock.
type State int

const (
	Free     State = iota // nobody holds it
	Held                  // held, renewed in time
	Expiring              // held, less than a third of its TTL left: a renewal is overdue
)

// String is the state as the STATE column shows it.
func (s State) String() string {
	switch s {
	case Held:
		return "held"
	case Expiring:
		return "expiring"
	default:
		return "free"
	}
}

// Row is one lock as the dashboard knows it.
type Row struct {
	Info coord.LockInfo
	// ReadAt is when Info was read (on the dashboard's clock); Info.TTLLeft
	// is as of then.
	ReadAt time.Time
	// Expiry is ReadAt + Info.TTLLeft for a held lock, zero for a free one.
	Expiry time.Time
	// Renewals counts the renewals seen for the current lease: every renewal
	// the watch reports (local), or a later expiry found by a read (etcd,
	// whose renewals the watch does not show).
	Renewals int
	// Failures is the number of renewal failures in the lock's kept history
	// and Stale the number of stale tokens refused; -1 until read.
	Failures int
	Stale    int
	// HistAt is when Failures and Stale were read (zero: never).
	HistAt time.Time

	match string // lower-cased "name\nholder", for the filter
}

// TTLLeft is the time left on the lease at now, counted down from the last
// read (display only: the coordinator decides).
func (r *Row) TTLLeft(now time.Time) time.Duration {
	if !r.Info.Held {
		return 0
	}
	d := r.Expiry.Sub(now)
	if d < 0 {
		return 0
	}
	return d
}

// State is the row's state at now.
func (r *Row) State(now time.Time) State {
	if !r.Info.Held {
		return Free
	}
	if r.Info.TTL > 0 && r.TTLLeft(now) < r.Info.TTL/3 {
		return Expiring
	}
	return Held
}

// Label is what the STATE column and the details say of the row in state
// st: "frozen" for a lock an operator froze (fence freeze), "limit N" for
// one held to N holders (fence limit), "2/3 held" for a semaphore held
// with 2 of its 3 slots, else st. The limit wins: it is what an
// operator must see first (the holder and the TTL bar show the rest).
func (r *Row) Label(st State) string {
	switch l := r.Info.Limit; {
	case l == nil && r.Info.Slots > 1 && st == Held:
		return fmt.Sprintf("%d/%d held", len(r.Info.Holders), r.Info.Slots) // a semaphore
	case l == nil:
		return st.String()
	case l.Max == 0:
		return "frozen"
	default:
		return "limit " + strconv.Itoa(l.Max)
	}
}

// limitRank orders rows by their limit for the state sort: frozen first,
// then the limited ones (tightest first), then the others.
func (r *Row) limitRank() int {
	if l := r.Info.Limit; l != nil {
		return l.Max
	}
	return coord.MaxLimit + 1
}

// Token is the holder's token, or the last token issued for a free lock.
func (r *Row) Token() uint64 {
	if r.Info.Held {
		return r.Info.Token
	}
	return r.Info.LastToken
}

// SortKey is a column the table can be sorted by.
type SortKey int

const (
	ByName     SortKey = iota // name, A to Z
	ByState                   // frozen, limit N, expiring, held, free
	ByTTL                     // least TTL left first
	ByHeldFor                 // held longest first
	ByToken                   // largest token first
	ByFailures                // most renewal failures first
	ByStale                   // most stale refusals first
	numSortKeys
)

// String names the key as the status bar shows it.
func (k SortKey) String() string {
	return [...]string{"name", "state", "ttl", "held for", "token", "failures", "stale"}[k]
}

// Next is the key after k, wrapping around.
func (k SortKey) Next() SortKey { return (k + 1) % numSortKeys }

// Totals counts the rows.
type Totals struct {
	Locks, Held, Expiring, Waiters int
	// Frozen and Limited count the locks an operator limit binds (frozen,
	// or limited to N holders).
	Frozen, Limited int
}

// Store is the set of rows, sorted by a key and filtered by a string. A
// change only marks the order out of date; the next read of the rows sorts
// them again (the rows are nearly in order then: the sort is quick).
type Store struct {
	rows    map[string]*Row
	all     []*Row // every row, in sort order when !dirty
	shown   []*Row // the rows matching filter, in sort order when !dirty
	key     SortKey
	reverse bool
	filter  string // lower case; "" matches everything
	dirty   bool   // all (a row came or went) or the order changed
	// now is the time of the last Apply, Replace, SetSort or Tick: the
	// state sort and the totals take the states as of now. It moves only
	// with a re-sort when the order depends on it (the state sort), so
	// that the order holds between two sorts.
	now time.Time
}

// New returns an empty store sorted by name.
func New() *Store {
	return &Store{rows: make(map[string]*Row)}
}

// Rows is the filtered rows in order. The slice belongs to the store and is
// valid until the next change.
func (s *Store) Rows() []*Row {
	s.sort()
	return s.shown
}

// All is every row in order, ignoring the filter. The slice belongs to the
// store and is valid until the next change.
func (s *Store) All() []*Row {
	s.sort()
	return s.all
}

// Get is the row of a lock, nil if unknown.
func (s *Store) Get(name string) *Row { return s.rows[name] }

// Index is the position of a lock in Rows, -1 when it is not there.
func (s *Store) Index(name string) int {
	r := s.rows[name]
	if r == nil || !s.matches(r) {
		return -1
	}
	if i, ok := slices.BinarySearchFunc(s.Rows(), r, s.cmp); ok {
		return i
	}
	return -1
}

// Sort is the current sort key and direction.
func (s *Store) Sort() (SortKey, bool) { return s.key, s.reverse }

// Filter is the current filter.
func (s *Store) Filter() string { return s.filter }

// SetSort sorts by key, reversed or not, as of now.
func (s *Store) SetSort(key SortKey, reverse bool, now time.Time) {
	s.key, s.reverse, s.now, s.dirty = key, reverse, now, true
}

// SetFilter keeps the rows whose name or holder contains f, ignoring case.
func (s *Store) SetFilter(f string) {
	if f = strings.ToLower(f); f != s.filter {
		s.filter, s.dirty = f, true
	}
}

// Tick moves the store's clock to now, for the once-a-second tick: held
// locks become expiring as their TTLs run down, and, when sorted by state,
// move.
func (s *Store) Tick(now time.Time) {
	s.now = now
	s.dirty = s.dirty || s.key == ByState
}

// Apply records new states of locks read at at: events of the watch, or
// reads (events of no type).
func (s *Store) Apply(at time.Time, evs ...coord.Event) {
	s.now, s.dirty = at, true
	for _, ev := range evs {
		s.update(ev, at)
	}
}

// Replace makes the store hold exactly the locks of a full listing read at
// at: rows missing from it are dropped, the others updated.
func (s *Store) Replace(at time.Time, infos []coord.LockInfo) {
	s.now, s.dirty = at, true
	seen := make(map[string]struct{}, len(infos))
	for _, info := range infos {
		seen[info.Name] = struct{}{}
		s.update(coord.Event{Info: info}, at)
	}
	for name := range s.rows {
		if _, ok := seen[name]; !ok {
			delete(s.rows, name)
		}
	}
	s.all = slices.DeleteFunc(s.all, func(r *Row) bool { return s.rows[r.Info.Name] != r })
}

// SetCounts records a lock's history counters, read at at.
func (s *Store) SetCounts(name string, failures, stale int, at time.Time) {
	r := s.rows[name]
	if r == nil {
		return
	}
	r.HistAt = at
	if r.Failures != failures || r.Stale != stale {
		r.Failures, r.Stale, s.dirty = failures, stale, true
	}
}

// Totals counts the rows (all of them, not only the filtered ones), with
// the states as of the store's clock (the last change or Tick).
func (s *Store) Totals() Totals {
	var t Totals
	for _, r := range s.rows {
		if r.Info.Held {
			t.Held++
		}
		if r.State(s.now) == Expiring {
			t.Expiring++
		}
		t.Waiters += r.Info.Waiters
		if l := r.Info.Limit; l != nil && l.Max == 0 {
			t.Frozen++
		} else if l != nil {
			t.Limited++
		}
	}
	t.Locks = len(s.rows)
	return t
}

// update applies ev to its row, creating it.
func (s *Store) update(ev coord.Event, at time.Time) {
	info := ev.Info
	r := s.rows[info.Name]
	if r == nil {
		r = &Row{Failures: -1, Stale: -1}
		s.rows[info.Name] = r
		s.all = append(s.all, r)
	}
	old := r.Info
	oldExpiry := r.Expiry
	r.Info, r.ReadAt = info, at
	if info.Held {
		r.Expiry = at.Add(info.TTLLeft)
	} else {
		r.Expiry = time.Time{}
	}
	switch {
	case !info.Held || !old.Held || old.LeaseID != info.LeaseID || old.Token != info.Token:
		r.Renewals = 0
	case ev.Type == coord.EventRenewed:
		r.Renewals++
	case r.Expiry.Sub(oldExpiry) > info.TTL/4:
		// The expiry moved on by more than clock noise between two
		// reads: the holder renewed at least once (see Renewals).
		r.Renewals++
	}
	if old.Name == "" || old.Holder != info.Holder {
		r.match = strings.ToLower(info.Name + "\n" + info.Holder)
	}
}

func (s *Store) matches(r *Row) bool {
	return s.filter == "" || strings.Contains(r.match, s.filter)
}

// sort brings all and shown up to date after changes.
func (s *Store) sort() {
	if !s.dirty {
		return
	}
	s.dirty = false
	slices.SortFunc(s.all, s.cmp)
	s.shown = s.all
	if s.filter != "" {
		s.shown = nil
		for _, r := range s.all {
			if s.matches(r) {
				s.shown = append(s.shown, r)
			}
		}
	}
}

// cmp is the total order of the rows: the sort key, then the name, so that
// equal keys never swap places between frames.
func (s *Store) cmp(a, b *Row) int {
	c := s.cmpKey(a, b)
	if c == 0 {
		c = strings.Compare(a.Info.Name, b.Info.Name)
	}
	if s.reverse {
		return -c
	}
	return c
}

func (s *Store) cmpKey(a, b *Row) int {
	switch s.key {
	case ByState:
		// As the column reads: frozen, then limit N (smallest first),
		// then expiring (2), held (1), free (0).
		if c := cmp.Compare(a.limitRank(), b.limitRank()); c != 0 {
			return c
		}
		return cmp.Compare(b.State(s.now), a.State(s.now))
	case ByTTL:
		if c := heldFirst(a, b); c != 0 || !a.Info.Held {
			return c
		}
		return a.Expiry.Compare(b.Expiry)
	case ByHeldFor:
		if c := heldFirst(a, b); c != 0 || !a.Info.Held {
			return c
		}
		za, zb := a.Info.AcquiredAt.IsZero(), b.Info.AcquiredAt.IsZero()
		if za || zb {
			return boolCmp(za, zb)
		}
		return a.Info.AcquiredAt.Compare(b.Info.AcquiredAt)
	case ByToken:
		return cmp.Compare(b.Token(), a.Token())
	case ByFailures:
		return cmp.Compare(b.Failures, a.Failures)
	case ByStale:
		return cmp.Compare(b.Stale, a.Stale)
	}
	return 0
}

// heldFirst orders held rows before free ones.
func heldFirst(a, b *Row) int { return boolCmp(!a.Info.Held, !b.Info.Held) }

// boolCmp orders false before true.
func boolCmp(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	default:
		return -1
	}
}
