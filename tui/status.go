package tui

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/charmbracelet/x/ansi"

	"github.com/fence-dev/fence/tui/internal/format"
)

// minBackend is the least width the backend's name keeps: on a narrow
// screen the parts on the right go first (dropPart).
const minBackend = 20

// statusView draws the status line, exactly the screen's width: the
// backend, its health, and the parts on the right (rightParts) that fit.
func (m *Model) statusView() string {
	s := m.styles
	health, ok := m.health()
	sep := s.Status.Render(" │ ")
	parts := m.rightParts()
	fixed := ansi.StringWidth(health) + ansi.StringWidth(sep)
	right := m.joinParts(sep, parts)
	for len(parts) > 0 && fixed+ansi.StringWidth(right)+minBackend > m.width {
		parts = dropPart(parts)
		right = m.joinParts(sep, parts)
	}
	room := m.width - fixed - ansi.StringWidth(right)
	if ok {
		health, room = m.withWarning(health, room)
	}
	backend := " " + cmp.Or(m.backend, "coordinator")
	line := s.Status.Render(format.Fit(backend, max(room, 0))) + sep + health + right
	switch n := ansi.StringWidth(line); {
	case n < m.width:
		return line + s.Status.Render(strings.Repeat(" ", m.width-n))
	case n > m.width:
		return ansi.Truncate(line, m.width, "")
	}
	return line
}

// health is the coordinator's health as the dashboard last saw it: "● ok"
// (ok: the last read worked and the watch runs), or why not, cut to a
// third of the width (a half when it does not answer: how long it has not
// answered matters most), or "… connecting" before anything was read.
func (m *Model) health() (text string, ok bool) {
	s := m.styles
	cut := func(msg string, share int) string {
		return format.Fit(msg, min(ansi.StringWidth(msg), max(m.width/share, 12)))
	}
	since, silent := m.unanswered()
	switch {
	case silent && (m.readErr == nil || m.now.Sub(since) >= time.Second):
		msg := fmt.Sprintf("no answer for %s (since %s)", format.Duration(m.now.Sub(since).Truncate(time.Second)),
			since.In(m.opts.Location).Format("15:04:05"))
		if m.readErr != nil {
			msg += ": " + m.readErr.Error()
		}
		return s.Down.Render("✖ " + cut(msg, 2)), false
	case m.readErr != nil:
		return s.Down.Render("✖ " + cut("unavailable: "+m.readErr.Error(), 2)), false
	case m.watchErr != nil:
		// Reads work, the watch is lost and being restarted.
		return s.Warn.Render("▲ " + cut(m.watchErr.Error()+", retrying", 3)), false
	case m.watching && !m.lastOK.IsZero():
		return s.OK.Render("● ok"), true
	}
	return s.Status.Render("… connecting"), false
}

// part is a part of the right of the line, and its rank: on a narrow
// screen the lowest goes first.
type part struct {
	text string
	rank int
}

// rightParts is what the right of the line shows, in order: the latency of
// the last read (when known), the totals ("N shown · N locks · N held · N
// expiring · N waiting", the shown only with a filter, the waiting only
// when some wait), the locks an operator limit binds ("1 frozen · 2
// limited", when any: the STATE column says it too), the sort. The limits
// go first, then the sort (the table header marks it too), then the
// latency, then the totals.
func (m *Model) rightParts() []part {
	var parts []part
	if !m.lastOK.IsZero() {
		parts = append(parts, part{"read " + format.Latency(m.latency), 2})
	}
	t := m.totals
	locks := "locks"
	if t.Locks == 1 {
		locks = "lock"
	}
	totals := fmt.Sprintf("%d %s · %d held · %d expiring", t.Locks, locks, t.Held, t.Expiring)
	if t.Waiters > 0 {
		totals += fmt.Sprintf(" · %d waiting", t.Waiters)
	}
	if m.store.Filter() != "" {
		totals = fmt.Sprintf("%d shown · ", len(m.store.Rows())) + totals
	}
	parts = append(parts, part{totals, 3})
	var limits []string
	if t.Frozen > 0 {
		limits = append(limits, fmt.Sprintf("%d frozen", t.Frozen))
	}
	if t.Limited > 0 {
		limits = append(limits, fmt.Sprintf("%d limited", t.Limited))
	}
	if len(limits) > 0 {
		parts = append(parts, part{strings.Join(limits, " · "), 0})
	}
	key, reverse := m.store.Sort()
	sort := "sort " + key.String()
	if reverse {
		sort += " (rev)"
	}
	return append(parts, part{sort, 1})
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

func (m *Model) joinParts(sep string, parts []part) string {
	out := ""
	for _, p := range parts {
		out += sep + m.styles.Status.Render(p.text)
	}
	return out
}

// withWarning adds a known problem of the coordinator (Options.Warning)
// beside "● ok" (the coordinator answers: health stays ok), in what the
// backend can spare of its room; at the least its mark. It returns the
// health and the room left.
func (m *Model) withWarning(health string, room int) (string, int) {
	spare := min(room-minBackend, max(m.width/3, 12))
	if m.opts.Warning == "" || spare < 2 {
		return health, room
	}
	w := "▲"
	if spare >= 2+8 {
		w += " " + format.Fit(m.opts.Warning, min(ansi.StringWidth(m.opts.Warning), spare-3))
	}
	return health + " " + m.styles.Warn.Render(w), room - 1 - ansi.StringWidth(w)
}
