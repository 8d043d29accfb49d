// Package trim applies a history's bounds for the stores.
package trim

import (
	"context"
	"slices"
	"time"

	"github.com/fence-dev/fence/pkg/history"
	"github.com/fence-dev/fence/pkg/history/internal/opts"
)

// Kept applies the bounds to a lock's events (oldest first) as a reader
// sees them: it drops the events older than the cutoff and keeps the last
// MaxEvents, then the last limit (when limit > 0). It reuses evs.
func Kept[E any](o opts.Options, evs []E, at func(E) time.Time, limit int) []E {
	cut := o.Cutoff()
	out := evs[:0]
	for _, e := range evs {
		if !at(e).Before(cut) {
			out = append(out, e)
		}
	}
	if n := o.Window(limit); len(out) > n {
		out = out[len(out)-n:]
	}
	return out
}

// Newest turns a lock's entries read newest first into History's answer:
// oldest first, the bounds applied, at most limit (0: no limit). It reuses
// ents.
func Newest(o opts.Options, ents []history.Entry, limit int) []history.Event {
	slices.Reverse(ents)
	ents = Kept(o, ents, EntryTime, limit)
	out := make([]history.Event, len(ents))
	for i, e := range ents {
		out[i] = e.Event
	}
	return out
}

// EntryTime is the time of an entry's event.
func EntryTime(e history.Entry) time.Time { return e.Event.Time }

// EachLock normalizes evs (history.Normalize), drops those already past
// the age bound (kept nowhere), and calls write with each lock's events
// left, in their order, the locks in order of first appearance: the
// skeleton of every store's Append. It stops at the first error.
func EachLock(ctx context.Context, o opts.Options, evs []history.Event, write func(ctx context.Context, lock string, evs []history.Event) error) error {
	now, cut := o.Now(), o.Cutoff()
	var locks []string
	byLock := map[string][]history.Event{}
	for _, ev := range evs {
		ev, err := history.Normalize(ev, now)
		if err != nil {
			return err
		}
		if ev.Time.Before(cut) {
			continue
		}
		if _, ok := byLock[ev.Lock]; !ok {
			locks = append(locks, ev.Lock)
		}
		byLock[ev.Lock] = append(byLock[ev.Lock], ev)
	}
	for _, lock := range locks {
		if err := write(ctx, lock, byLock[lock]); err != nil {
			return err
		}
	}
	return nil
}
