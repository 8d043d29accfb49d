// Package contention sums up a lock's waits beside its holds, from its
// history: the seed's FM5, "measure lock wait time separately from hold
// time; if wait dominates, the lock is the bottleneck". fence show and the
// dashboard's details both draw it from here.
package contention

import (
	"slices"
	"strings"
	"time"

	"github.com/fence-dev/fence/pkg/history"
)

// MaxRecent is how many waits and holds the sparklines show.
const MaxRecent = 20

// Durations sums up durations.
type Durations struct {
	Count              int
	Median, Max, Total time.Duration   // zero when Count is 0
	Recent             []time.Duration // the last MaxRecent, oldest first
}

// Summary is the waits (the waited of acquired events: how long each
// holder waited for the lock) and the holds (the held-for of released
// ones) of a lock's events.
type Summary struct {
	Wait, Hold Durations
}

// Of sums up events, oldest first (as history.Store returns them).
func Of(events []history.Event) Summary {
	var waits, holds []time.Duration
	for _, e := range events {
		switch e.Kind {
		case history.Acquired:
			waits = append(waits, max(e.Wait, 0))
		case history.Released:
			holds = append(holds, max(e.HeldFor, 0))
		}
	}
	return Summary{Wait: durations(waits), Hold: durations(holds)}
}

func durations(ds []time.Duration) Durations {
	v := Durations{Count: len(ds)}
	if len(ds) == 0 {
		return v
	}
	sorted := slices.Clone(ds)
	slices.Sort(sorted)
	v.Median, v.Max = sorted[len(sorted)/2], sorted[len(sorted)-1]
	for _, d := range ds {
		v.Total += d
	}
	v.Recent = ds[max(0, len(ds)-MaxRecent):]
	return v
}

// Empty reports whether there is neither a wait nor a hold.
func (s Summary) Empty() bool { return s.Wait.Count == 0 && s.Hold.Count == 0 }

// Top is the scale both sparklines share: the longest wait or hold.
func (s Summary) Top() time.Duration { return max(s.Wait.Max, s.Hold.Max) }

// Bottleneck reports whether the waits add up to more than the holds: the
// lock, not the work under it, is what takes the time.
func (s Summary) Bottleneck() bool {
	return s.Wait.Count > 0 && s.Hold.Count > 0 && s.Wait.Total > s.Hold.Total
}

// sparks are the levels of a sparkline, lowest first.
var sparks = []rune("▁▂▃▄▅▆▇█")

// Sparkline draws ds on the scale top (Summary.Top), one cell each, so that
// a row of waits and one of holds compare at a glance.
func Sparkline(ds []time.Duration, top time.Duration) string {
	var b strings.Builder
	for _, d := range ds {
		i := 0
		if top > 0 {
			i = int(float64(d) / float64(top) * float64(len(sparks)-1))
		}
		b.WriteRune(sparks[min(max(i, 0), len(sparks)-1)])
	}
	return b.String()
}
