// Package statusbar draws the dashboard's status line: where the
// coordinator is, whether it answers, how long its last read took, and the
// totals.
package statusbar

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/charmbracelet/x/ansi"
	"github.com/fence-dev/fence/tui/internal/format"
	"github.com/fence-dev/fence/tui/internal/store"
	"github.com/fence-dev/fence/tui/styles"
)

// Health is the coordinator's health as the dashboard last saw it.
type Health int

const (
	Connecting  Health = iota // nothing read yet
	OK                        // the last read worked and the watch runs
	Degraded                  // reads work, the watch is lost and being restarted
	Unavailable               // the last read failed
)

// Data is what the status line shows.
type Data struct {
	Backend string // coord.Coordinator.Describe()
	Health  Health
	Detail  string        // why, when not OK
	Warning string        // shown beside "● ok": a known problem of the coordinator (a server version's bug)
	Latency time.Duration // of the last read
	Read    bool          // Latency is known
	Totals  store.Totals
	Shown   int // rows passing the filter
	Filter  string
	Sort    store.SortKey
	Reverse bool
}

// minBackend is the least width the backend's name keeps: on a narrow
// screen the parts on the right go first (dropPart).
const minBackend = 20

// View draws the status line, exactly width cells wide: the backend, its
// health, and the parts on the right (rightParts) that fit.
func View(s *styles.Styles, width int, d Data) string {
	if width <= 0 {
		return ""
	}
	health := healthText(s, width, d)
	sep := s.Status.Render(" │ ")
	parts := rightParts(d)
	fixed := ansi.StringWidth(health) + ansi.StringWidth(sep)
	right := joinParts(s, sep, parts)
	for len(parts) > 0 && fixed+ansi.StringWidth(right)+minBackend > width {
		parts = dropPart(parts)
		right = joinParts(s, sep, parts)
	}
	room := width - fixed - ansi.StringWidth(right)
	health, room = withWarning(s, width, d, health, room)
	backend := " " + cmp.Or(d.Backend, "coordinator")
	return fitLine(s, s.Status.Render(format.Fit(backend, max(room, 0)))+sep+health+right, width)
}

// healthText is the coordinator's health: "● ok", or why not, cut to a
// third of the width (a half when it does not answer: how long it has not
// answered matters most).
func healthText(s *styles.Styles, width int, d Data) string {
	cut := func(def string, share int) string {
		msg := cmp.Or(d.Detail, def)
		return format.Fit(msg, min(ansi.StringWidth(msg), max(width/share, 12)))
	}
	switch d.Health {
	case OK:
		return s.OK.Render("● ok")
	case Degraded:
		return s.Warn.Render("▲ " + cut("degraded", 3))
	case Unavailable:
		return s.Down.Render("✖ " + cut("unavailable", 2))
	}
	return s.Status.Render("… connecting")
}

// part is a part of the right of the line, and its rank: on a narrow
// screen the lowest goes first.
type part struct {
	text string
	rank int
}

// rightParts is what the right of the line shows, in order: the latency of
// the last read (when known), the totals, the locks an operator limit binds
// (when any), the sort. The limits go first, then the sort (the table
// header marks it too), then the latency, then the totals.
func rightParts(d Data) []part {
	var parts []part
	if d.Read {
		parts = append(parts, part{"read " + format.Latency(d.Latency), 2})
	}
	parts = append(parts, part{totalsText(d), 3})
	if l := limitsText(d.Totals); l != "" {
		parts = append(parts, part{l, 0})
	}
	return append(parts, part{sortText(d.Sort.String(), d.Reverse), 1})
}

// totalsText is "N shown · N locks · N held · N expiring · N waiting"; the
// shown only with a filter, the waiting only when some wait.
func totalsText(d Data) string {
	t := d.Totals
	locks := "locks"
	if t.Locks == 1 {
		locks = "lock"
	}
	totals := fmt.Sprintf("%d %s · %d held · %d expiring", t.Locks, locks, t.Held, t.Expiring)
	if t.Waiters > 0 {
		totals += fmt.Sprintf(" · %d waiting", t.Waiters)
	}
	if d.Filter != "" {
		totals = fmt.Sprintf("%d shown · ", d.Shown) + totals
	}
	return totals
}

// limitsText is the locks an operator limit binds ("1 frozen · 2
// limited"), "" when none: a part of their own, the first to go on a
// narrow screen (the STATE column says it too).
func limitsText(t store.Totals) string {
	var limits []string
	if t.Frozen > 0 {
		limits = append(limits, fmt.Sprintf("%d frozen", t.Frozen))
	}
	if t.Limited > 0 {
		limits = append(limits, fmt.Sprintf("%d limited", t.Limited))
	}
	return strings.Join(limits, " · ")
}

func sortText(key string, reverse bool) string {
	if reverse {
		return "sort " + key + " (rev)"
	}
	return "sort " + key
}

// dropPart is parts without the one of the lowest rank.
func dropPart(parts []part) []part {
	low := 0
	for i, p := range parts {
		if p.rank < parts[low].rank {
			low = i
		}
	}
	return slices.Delete(slices.Clone(parts), low, low+1)
}

func joinParts(s *styles.Styles, sep string, parts []part) string {
	out := ""
	for _, p := range parts {
		out += sep + s.Status.Render(p.text)
	}
	return out
}

// withWarning adds a known problem of the coordinator beside "● ok" (the
// coordinator answers: health stays ok), in what the backend can spare of
// its room; at the least its mark. It returns the health and the room
// left.
func withWarning(s *styles.Styles, width int, d Data, health string, room int) (string, int) {
	if d.Health != OK || d.Warning == "" {
		return health, room
	}
	spare := min(room-minBackend, max(width/3, 12))
	if spare < 2 {
		return health, room
	}
	w := "▲"
	if spare >= 2+8 {
		w += " " + format.Fit(d.Warning, min(ansi.StringWidth(d.Warning), spare-3))
	}
	return health + " " + s.Warn.Render(w), room - 1 - ansi.StringWidth(w)
}

// fitLine pads or cuts line to exactly width cells.
func fitLine(s *styles.Styles, line string, width int) string {
	switch n := ansi.StringWidth(line); {
	case n < width:
		return line + s.Status.Render(strings.Repeat(" ", width-n))
	case n > width:
		return ansi.Truncate(line, width, "")
	}
	return line
}
