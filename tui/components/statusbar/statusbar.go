// Package statusbar draws the dashboard's status line: where the
// coordinator is, whether it answers, how long its last read took, and the
// totals.
package statusbar

import (
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

// View draws the status line, exactly width cells wide.
func View(s *styles.Styles, width int, d Data) string {
	if width <= 0 {
		return ""
	}
	detail := func(def string) string {
		return format.Fit(orDefault(d.Detail, def), min(ansi.StringWidth(orDefault(d.Detail, def)), max(width/3, 12)))
	}
	var health string
	switch d.Health {
	case OK:
		health = s.OK.Render("● ok")
	case Degraded:
		health = s.Warn.Render("▲ " + detail("degraded"))
	case Unavailable:
		// Wider: how long the coordinator has not answered matters most.
		msg := orDefault(d.Detail, "unavailable")
		health = s.Down.Render("✖ " + format.Fit(msg, min(ansi.StringWidth(msg), max(width/2, 12))))
	default:
		health = s.Status.Render("… connecting")
	}
	read := ""
	if d.Read {
		read = "read " + format.Latency(d.Latency)
	}
	t := d.Totals
	totals := plural(t.Locks, "lock", "locks") + fmt.Sprintf(" · %d held · %d expiring", t.Held, t.Expiring)
	// The locks an operator limit binds: a part of their own, the first
	// to go on a narrow screen (the STATE column says it too).
	var limits []string
	if t.Frozen > 0 {
		limits = append(limits, fmt.Sprintf("%d frozen", t.Frozen))
	}
	if t.Limited > 0 {
		limits = append(limits, fmt.Sprintf("%d limited", t.Limited))
	}
	if t.Waiters > 0 {
		totals += fmt.Sprintf(" · %d waiting", t.Waiters)
	}
	if d.Filter != "" {
		totals = fmt.Sprintf("%d shown · ", d.Shown) + totals
	}
	dir := ""
	if d.Reverse {
		dir = " (rev)"
	}
	sort := "sort " + d.Sort.String() + dir

	sep := s.Status.Render(" │ ")
	var right []string
	if read != "" {
		right = append(right, read)
	}
	right = append(right, totals, sort)
	if len(limits) > 0 {
		right = slices.Insert(right, len(right)-1, strings.Join(limits, " · "))
	}
	join := func() string {
		out := ""
		for _, p := range right {
			out += sep + s.Status.Render(p)
		}
		return out
	}
	// The backend takes what is left, at least minBackend cells; on a
	// narrow screen the sort goes first (the table header marks it too),
	// then the latency, then the totals.
	const minBackend = 20
	backend := " " + orDefault(d.Backend, "coordinator")
	fixed := ansi.StringWidth(health) + ansi.StringWidth(sep)
	rightStr := join()
	for len(right) > 0 && fixed+ansi.StringWidth(rightStr)+minBackend > width {
		switch {
		case len(limits) > 0:
			right = slices.Delete(right, len(right)-2, len(right)-1)
			limits = nil
		case len(right) == 3:
			right = right[:2] // sort
		case len(right) == 2 && read != "":
			right = right[1:] // latency
		default:
			right = right[:len(right)-1]
		}
		rightStr = join()
	}
	room := width - fixed - ansi.StringWidth(rightStr)
	if d.Health == OK && d.Warning != "" {
		// The coordinator answers: health stays "ok" and the known
		// problem goes beside it, in what the backend can spare; at
		// the least its mark.
		if spare := min(room-minBackend, max(width/3, 12)); spare >= 2 {
			w := "▲"
			if spare >= 2+8 {
				w += " " + format.Fit(d.Warning, min(ansi.StringWidth(d.Warning), spare-3))
			}
			health += " " + s.Warn.Render(w)
			room -= 1 + ansi.StringWidth(w)
		}
	}
	line := s.Status.Render(format.Fit(backend, max(room, 0))) + sep + health + rightStr
	if n := ansi.StringWidth(line); n < width {
		line += s.Status.Render(strings.Repeat(" ", width-n))
	} else if n > width {
		line = ansi.Truncate(line, width, "")
	}
	return line
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// plural is "1 lock", "0 locks", "2 locks".
func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}
