package cli

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/fence-dev/fence/pkg/history"

	"github.com/fence-dev/fence/internal/output"
	"github.com/fence-dev/fence/pkg/coord"
)

// The shapes of fence's JSON and YAML output. Every field is always present
// (null when it does not apply), names are snake_case, times are RFC 3339 in
// UTC and durations are seconds. docs/json.md documents them; change both
// together, and only by adding fields.

// lockView is one lock: status, list, show, revoke.
type lockView struct {
	Name           string   `json:"name" yaml:"name"`
	Held           bool     `json:"held" yaml:"held"`
	Holder         *string  `json:"holder" yaml:"holder"`
	Token          *uint64  `json:"token" yaml:"token"`
	LeaseID        *string  `json:"lease_id" yaml:"lease_id"`
	TTLSeconds     *float64 `json:"ttl_seconds" yaml:"ttl_seconds"`
	TTLLeftSeconds *float64 `json:"ttl_left_seconds" yaml:"ttl_left_seconds"`
	AcquiredAt     *string  `json:"acquired_at" yaml:"acquired_at"`
	HeldForSeconds *float64 `json:"held_for_seconds" yaml:"held_for_seconds"`
	Waiters        int      `json:"waiters" yaml:"waiters"`
	// Queue is who waits, first served first ([] when nobody does).
	Queue     []waiterView `json:"queue" yaml:"queue"`
	LastToken uint64       `json:"last_token" yaml:"last_token"`
	Process   *processView `json:"process" yaml:"process"`
	// Limit is the operator limit that binds the lock (fence limit,
	// freeze), null when none does.
	Limit *limitView `json:"limit" yaml:"limit"`
	// Slots is the lock's slots (1 for a lock, N for a semaphore taken
	// with --slots N) and Holders every holder, oldest first (the holder
	// fields above describe the first).
	Slots   int          `json:"slots" yaml:"slots"`
	Holders []holderView `json:"holders" yaml:"holders"`
	// CoordinatorWarning is a known problem of the coordinator (an etcd
	// version with a lease-safety bug); fence status and show only.
	CoordinatorWarning string `json:"coordinator_warning,omitempty" yaml:"coordinator_warning,omitempty"`
}

// holderView is one holder of a lock.
type holderView struct {
	Slot           int          `json:"slot" yaml:"slot"`
	Holder         string       `json:"holder" yaml:"holder"`
	Token          uint64       `json:"token" yaml:"token"`
	LeaseID        string       `json:"lease_id" yaml:"lease_id"`
	TTLSeconds     float64      `json:"ttl_seconds" yaml:"ttl_seconds"`
	TTLLeftSeconds float64      `json:"ttl_left_seconds" yaml:"ttl_left_seconds"`
	AcquiredAt     *string      `json:"acquired_at" yaml:"acquired_at"`
	HeldForSeconds *float64     `json:"held_for_seconds" yaml:"held_for_seconds"`
	Process        *processView `json:"process" yaml:"process"`
}

func newHolderView(h coord.HolderInfo, now time.Time) holderView {
	v := holderView{Slot: h.Slot, Holder: h.Holder, Token: h.Token, LeaseID: h.LeaseID,
		TTLSeconds: output.Seconds(h.TTL), TTLLeftSeconds: output.Seconds(max(h.TTLLeft, 0)),
		AcquiredAt: output.Time(h.AcquiredAt), Process: newProcessView(h.Process)}
	if !h.AcquiredAt.IsZero() {
		v.HeldForSeconds = ptr(output.Seconds(coord.LockInfo{Held: true, AcquiredAt: h.AcquiredAt}.HeldFor(now)))
	}
	return v
}

type processView struct {
	PIDs []int `json:"pids" yaml:"pids"`
	PGID int   `json:"pgid" yaml:"pgid"`
}

func newProcessView(p *coord.ProcessInfo) *processView {
	if p == nil {
		return nil
	}
	return &processView{PIDs: append([]int{}, p.PIDs...), PGID: p.PGID}
}

// waiterView is one member of a lock's queue.
type waiterView struct {
	Holder         string   `json:"holder" yaml:"holder"`
	Since          *string  `json:"since" yaml:"since"`
	WaitingSeconds *float64 `json:"waiting_seconds" yaml:"waiting_seconds"`
	LeaseID        *string  `json:"lease_id" yaml:"lease_id"`
	PID            *int     `json:"pid" yaml:"pid"`
}

func newWaiterView(w coord.Waiter, now time.Time) waiterView {
	v := waiterView{Holder: w.Holder, Since: output.Time(w.Since), LeaseID: nonZero(w.LeaseID), PID: nonZero(w.PID)}
	if !w.Since.IsZero() {
		v.WaitingSeconds = ptr(output.Seconds(max(now.Sub(w.Since), 0)))
	}
	return v
}

func ptr[T any](v T) *T { return &v }

// viewsOf is fn of every x, in order; never nil (JSON [] rather than null).
func viewsOf[T, V any](xs []T, fn func(T) V) []V {
	vs := make([]V, 0, len(xs))
	for _, x := range xs {
		vs = append(vs, fn(x))
	}
	return vs
}

func newLockView(i coord.LockInfo, now time.Time) lockView {
	v := lockView{Name: i.Name, Held: i.Held, Waiters: i.Waiters, LastToken: i.LastToken,
		Queue:   viewsOf(i.Queue, func(w coord.Waiter) waiterView { return newWaiterView(w, now) }),
		Holders: viewsOf(i.AllHolders(), func(h coord.HolderInfo) holderView { return newHolderView(h, now) }),
		Limit:   newLimitView(i.Limit), Slots: max(i.Slots, 1), Process: newProcessView(i.Process)}
	if i.Held {
		v.Holder = ptr(i.Holder)
		v.Token = ptr(i.Token)
		v.LeaseID = ptr(i.LeaseID)
		v.TTLSeconds = ptr(output.Seconds(i.TTL))
		v.TTLLeftSeconds = ptr(output.Seconds(max(i.TTLLeft, 0)))
		v.AcquiredAt = output.Time(i.AcquiredAt)
		if !i.AcquiredAt.IsZero() {
			v.HeldForSeconds = ptr(output.Seconds(i.HeldFor(now)))
		}
		v.LastToken = max(v.LastToken, i.Token)
	}
	for _, h := range i.Holders {
		v.LastToken = max(v.LastToken, h.Token)
	}
	return v
}

// leaseView is a granted lease: acquire.
type leaseView struct {
	Lock       string  `json:"lock" yaml:"lock"`
	Token      uint64  `json:"token" yaml:"token"`
	LeaseID    string  `json:"lease_id" yaml:"lease_id"`
	Holder     string  `json:"holder" yaml:"holder"`
	TTLSeconds float64 `json:"ttl_seconds" yaml:"ttl_seconds"`
	AcquiredAt *string `json:"acquired_at" yaml:"acquired_at"`
	// Slot is the slot taken of a semaphore (--slots), 0 for a lock.
	Slot int `json:"slot" yaml:"slot"`
}

func newLeaseView(l coord.Lease) leaseView {
	return leaseView{
		Lock: l.Name, Token: l.Token, LeaseID: l.ID, Holder: l.Holder,
		TTLSeconds: output.Seconds(l.TTL), AcquiredAt: output.Time(l.AcquiredAt), Slot: l.Slot,
	}
}

// eventView is one history event: show.
type eventView struct {
	Time           *string  `json:"time" yaml:"time"`
	Kind           string   `json:"kind" yaml:"kind"`
	Holder         *string  `json:"holder" yaml:"holder"`
	Token          *uint64  `json:"token" yaml:"token"`
	WaitSeconds    *float64 `json:"wait_seconds" yaml:"wait_seconds"`
	HeldForSeconds *float64 `json:"held_for_seconds" yaml:"held_for_seconds"`
	Count          *int     `json:"count" yaml:"count"`
	Error          *string  `json:"error" yaml:"error"`
	Key            *string  `json:"key" yaml:"key"`
	AcceptedToken  *uint64  `json:"accepted_token" yaml:"accepted_token"`
	Reason         *string  `json:"reason" yaml:"reason"`
}

func nonZero[T comparable](v T) *T {
	var zero T
	if v == zero {
		return nil
	}
	return &v
}

func newEventView(e history.Event) eventView {
	v := eventView{
		Time: output.Time(e.Time), Kind: string(e.Kind),
		Holder: nonZero(e.Holder), Token: nonZero(e.Token), Count: nonZero(e.Count),
		Error: nonZero(e.Error), Key: nonZero(e.Key), AcceptedToken: nonZero(e.AcceptedToken),
		Reason: nonZero(e.Reason),
	}
	if e.Kind == history.Acquired {
		v.WaitSeconds = ptr(output.Seconds(e.Wait))
	}
	if e.HeldFor > 0 {
		v.HeldForSeconds = ptr(output.Seconds(e.HeldFor))
	}
	return v
}

// showView is a lock and its recent events: show.
type showView struct {
	Lock lockView `json:"lock" yaml:"lock"`
	// Events (and Contention) would be null for a coordinator that keeps
	// no history (docs/json.md); every coordinator fence opens keeps one.
	Events []eventView `json:"events" yaml:"events"`
	// Completions are the lock's latest --once completion records, newest
	// first (absent when it has none).
	Completions []completionView `json:"completions,omitempty" yaml:"completions,omitempty"`
	// Contention is the waits and holds of the events shown, side by
	// side.
	Contention *contentionView `json:"contention" yaml:"contention"`
}

// textTime formats a time for text output: RFC 3339 in local time, to the
// second.
func textTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Local().Format(time.RFC3339)
}

// lockFields is the text form of a lock.
func lockFields(i coord.LockInfo, now time.Time) []output.Field {
	state := "free"
	switch {
	case i.Held && i.Slots > 1:
		state = fmt.Sprintf("held (%d/%d slots)", len(i.Holders), i.Slots)
	case i.Held:
		state = "held"
	case i.Limit != nil && i.Limit.Max == 0:
		state = "frozen"
	}
	fs := []output.Field{{Key: "lock", Value: i.Name}, {Key: "state", Value: state}}
	if i.Held {
		fs = append(fs,
			output.Field{Key: "holder", Value: i.Holder},
			output.Field{Key: "token", Value: strconv.FormatUint(i.Token, 10)},
			output.Field{Key: "lease_id", Value: i.LeaseID},
			output.Field{Key: "ttl", Value: output.Duration(i.TTL)},
			output.Field{Key: "ttl_left", Value: output.Duration(i.TTLLeft)},
			output.Field{Key: "acquired_at", Value: textTime(i.AcquiredAt)},
			output.Field{Key: "held_for", Value: output.Duration(i.HeldFor(now))})
	} else if i.LastToken > 0 {
		fs = append(fs, output.Field{Key: "last_token", Value: strconv.FormatUint(i.LastToken, 10)})
	}
	fs = append(fs, output.Field{Key: "waiters", Value: strconv.Itoa(i.Waiters)})
	if p := i.Process; p != nil { // a free lock has none
		fs = append(fs, output.Field{Key: "process", Value: fmt.Sprintf("pids %v, pgid %d", p.PIDs, p.PGID)})
	}
	if i.Limit != nil {
		fs = append(fs, output.Field{Key: "limit", Value: output.Clean(i.Limit.Describe())})
	}
	// A semaphore: every holder, one line each (the fields above are the
	// oldest's).
	for _, h := range i.Holders {
		fs = append(fs, output.Field{Key: fmt.Sprintf("slot %d", h.Slot), Value: fmt.Sprintf("%s, token %d, lease %s, ttl left %s, held for %s",
			h.Holder, h.Token, h.LeaseID, output.Duration(h.TTLLeft), output.Duration(coord.LockInfo{Held: true, AcquiredAt: h.AcquiredAt}.HeldFor(now)))})
	}
	return fs
}

// queueTable is the table form of a lock's queue: its place, holder, how
// long and since when it waits, and its lease (etcd) or process (local).
func queueTable(q []coord.Waiter, now time.Time) ([]string, [][]string) {
	header := []string{"#", "HOLDER", "WAITING", "SINCE"}
	lease := slices.ContainsFunc(q, func(w coord.Waiter) bool { return w.LeaseID != "" })
	pid := slices.ContainsFunc(q, func(w coord.Waiter) bool { return w.PID != 0 })
	if lease {
		header = append(header, "LEASE")
	}
	if pid {
		header = append(header, "PID")
	}
	rows := make([][]string, len(q))
	for i, w := range q {
		waiting := "-"
		if !w.Since.IsZero() {
			waiting = output.Duration(now.Sub(w.Since))
		}
		row := []string{strconv.Itoa(i + 1), output.Clean(w.Holder), waiting, textTime(w.Since)}
		if lease {
			row = append(row, cmp.Or(w.LeaseID, "-"))
		}
		if pid {
			p := "-"
			if w.PID != 0 {
				p = strconv.Itoa(w.PID)
			}
			row = append(row, p)
		}
		rows[i] = row
	}
	return header, rows
}

// listRows are the rows of a lock in the table of locks: one, or one per
// holder of a semaphore (its name followed by [SLOT]).
func listRows(i coord.LockInfo, now time.Time) [][]string {
	if i.Slots <= 1 || len(i.Holders) == 0 {
		return [][]string{listRow(i, now)}
	}
	var rows [][]string
	for _, h := range i.Holders {
		one := i
		one.Holder, one.Token, one.LeaseID, one.TTL, one.TTLLeft, one.AcquiredAt, one.Process =
			h.Holder, h.Token, h.LeaseID, h.TTL, h.TTLLeft, h.AcquiredAt, h.Process
		row := listRow(one, now)
		row[0] = fmt.Sprintf("%s[%d]", i.Name, h.Slot)
		rows = append(rows, row)
	}
	return rows
}

// listHeader and listRow are the table form of locks. limitHeader is the
// column added when a listed lock has an operator limit.
var (
	listHeader  = []string{"NAME", "HOLDER", "TOKEN", "TTL LEFT", "HELD FOR", "WAITERS"}
	limitHeader = "LIMIT"
)

func listRow(i coord.LockInfo, now time.Time) []string {
	if !i.Held {
		return []string{i.Name, "-", "-", "-", "-", strconv.Itoa(i.Waiters)}
	}
	return []string{
		i.Name, i.Holder, strconv.FormatUint(i.Token, 10),
		output.Duration(i.TTLLeft), output.Duration(i.HeldFor(now)), strconv.Itoa(i.Waiters),
	}
}

// eventHeader and eventRow are the table form of history events.
var eventHeader = []string{"TIME", "EVENT", "HOLDER", "TOKEN", "DETAIL"}

func eventRow(e history.Event) []string {
	token := "-"
	if e.Token > 0 {
		token = strconv.FormatUint(e.Token, 10)
	}
	holder := cmp.Or(e.Holder, "-")
	var detail string
	switch e.Kind {
	case history.Acquired:
		detail = "waited " + output.Duration(e.Wait)
	case history.Released:
		detail = "held " + output.Duration(e.HeldFor)
	case history.RenewalFailed:
		detail = fmt.Sprintf("%d failed: %s", e.Count, e.Error)
	case history.StaleRefused:
		detail = fmt.Sprintf("key %s: token %d < accepted %d", e.Key, e.Token, e.AcceptedToken)
	case history.Restarted:
		detail = fmt.Sprintf("restart %d: %s", e.Count, e.Reason)
	case history.Completed:
		detail = "key " + output.Clean(e.Key)
	case history.Limited:
		detail = fmt.Sprintf("limit %d", e.Count)
		if e.Reason != "" {
			detail += ": " + e.Reason
		}
	case history.Skipped:
		detail = "key " + output.Clean(e.Key) + " done already"
		if e.AcceptedToken > 0 {
			detail += fmt.Sprintf(" (token %d)", e.AcceptedToken)
		}
	default:
		if e.Error != "" {
			detail = e.Error
		}
		if e.Reason != "" {
			detail = e.Reason
		}
	}
	return []string{textTime(e.Time), string(e.Kind), holder, token, cmp.Or(detail, "-")}
}
