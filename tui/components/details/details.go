// Package details draws one lock: its holder, token, lease and counters,
// live from the dashboard's rows, and its event timeline from the
// coordinator's history, newest first, in a scrolling viewport.
package details

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fence-dev/fence/pkg/history"

	"github.com/charmbracelet/bubbles/viewport"

	"github.com/fence-dev/fence/internal/contention"
	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/tui/internal/format"
	"github.com/fence-dev/fence/tui/internal/store"
	"github.com/fence-dev/fence/tui/styles"
)

// headerLines is the number of lines above the timeline at least (a
// limit, a queue and waits add theirs).
const headerLines = 8

// TimeLayout is how the timeline prints times (the history is bounded by
// age: the year would only take room).
const TimeLayout = "01-02 15:04:05"

// acquiredLayout is how the acquisition time is printed.
const acquiredLayout = "2006-01-02 15:04:05"

// Model is the details view of one lock.
type Model struct {
	styles *styles.Styles
	loc    *time.Location
	width  int
	height int
	name   string
	vp     viewport.Model
	events []history.Event // newest first
	err    error
	loaded bool
	sum    contention.Summary // of the timeline's waits and holds
	// NoHistory says the coordinator keeps no history.
	NoHistory bool
	// Group, for a lock of a `fence shards` group (a member or a shard), is
	// the group's summary: drawn on the process line's right.
	Group string
}

// New returns a details view drawn with s, printing times in loc.
func New(s *styles.Styles, loc *time.Location) Model {
	if loc == nil {
		loc = time.Local
	}
	return Model{styles: s, loc: loc, vp: viewport.New(0, 0)}
}

// Open shows lock name, with its timeline not loaded yet.
func (m *Model) Open(name string) {
	m.name = name
	m.events, m.err, m.loaded = nil, nil, false
	m.sum = contention.Summary{}
	m.render()
	m.vp.GotoTop()
}

// Loaded says the timeline has been read (or failed to be).
func (m *Model) Loaded() bool { return m.loaded }

// Name is the lock shown.
func (m *Model) Name() string { return m.name }

// SetSize sets the view's size in cells.
func (m *Model) SetSize(width, height int) {
	m.width, m.height = max(width, 0), max(height, 0)
	m.vp.Width = m.width
	m.vp.Height = max(m.height-headerLines, 0)
	m.render()
}

// SetHistory sets the timeline: events oldest first, as
// history.Historian.History returns them, or the error that reading them
// gave. The scroll position is kept.
func (m *Model) SetHistory(events []history.Event, err error) {
	m.loaded = true
	m.err = err
	if err == nil {
		m.sum = contention.Of(events)
		m.events = slices.Clone(events)
		slices.Reverse(m.events)
	}
	m.render()
}

// ScrollDown scrolls the timeline by n lines (negative: up).
func (m *Model) ScrollDown(n int) {
	if n < 0 {
		m.vp.ScrollUp(-n)
	} else {
		m.vp.ScrollDown(n)
	}
}

// PageDown scrolls the timeline by pages (negative: up).
func (m *Model) PageDown(pages int) { m.ScrollDown(pages * max(m.vp.Height, 1)) }

// Top scrolls to the newest event.
func (m *Model) Top() { m.vp.GotoTop() }

// Bottom scrolls to the oldest event.
func (m *Model) Bottom() { m.vp.GotoBottom() }

func (m *Model) render() {
	if m.width == 0 {
		return
	}
	s := m.styles
	var lines []string
	switch {
	case m.NoHistory:
		lines = []string{s.Label.Render(format.Fit("  this coordinator keeps no history", m.width))}
	case !m.loaded:
		lines = []string{s.Label.Render(format.Fit("  loading…", m.width))}
	case m.err != nil:
		lines = []string{s.Err.Render(format.Fit("  history: "+m.err.Error(), m.width))}
	case len(m.events) == 0:
		lines = []string{s.Label.Render(format.Fit("  no events recorded", m.width))}
	default:
		lines = make([]string, 0, len(m.events))
		for _, ev := range m.events {
			lines = append(lines, m.eventLine(ev))
		}
	}
	m.vp.SetContent(strings.Join(lines, "\n"))
}

// kindWidth fits the longest kind, "deadline_exceeded".
const kindWidth = 17

func (m *Model) eventLine(ev history.Event) string {
	s := m.styles
	ts := ev.Time.In(m.loc).Format(TimeLayout)
	rest := m.width - 2 - len(TimeLayout) - 2 - kindWidth - 1
	kind := format.Fit(string(ev.Kind), kindWidth)
	switch ev.Kind {
	case history.Acquired, history.Released, history.Completed, history.Skipped, history.Thawed:
		kind = s.Good.Render(kind)
	default:
		kind = s.Bad.Render(kind)
	}
	if rest < 1 {
		return format.Fit("  "+ts+"  "+string(ev.Kind), m.width)
	}
	return "  " + s.Label.Render(ts) + "  " + kind + " " + format.Fit(Describe(ev), rest)
}

// Describe says what an event means, after its kind.
func Describe(ev history.Event) string {
	who := fmt.Sprintf("token %d", ev.Token)
	if ev.Holder != "" {
		who += " by " + ev.Holder
	}
	switch ev.Kind {
	case history.Acquired:
		if ev.Wait > 0 {
			return fmt.Sprintf("%s, waited %s", who, roundDur(ev.Wait))
		}
		return who
	case history.Released:
		return fmt.Sprintf("%s, held %s", who, roundDur(ev.HeldFor))
	case history.RenewalFailed:
		n := max(ev.Count, 1)
		msg := fmt.Sprintf("%s: %d failed renewal", who, n)
		if n > 1 {
			msg += "s"
		}
		if ev.Error != "" {
			msg += ", last: " + ev.Error
		}
		return msg
	case history.LeaseLost:
		return who + ": lease lost, command stopped"
	case history.DeadlineExceeded:
		return who + ": deadline reached, command stopped"
	case history.Expired:
		return who + ": expired, taken over"
	case history.Revoked:
		return who + ": revoked"
	case history.Completed:
		return fmt.Sprintf("key %s: ran to success, %s", strconv.Quote(ev.Key), who)
	case history.Skipped:
		msg := fmt.Sprintf("key %s: done already, nothing run", strconv.Quote(ev.Key))
		if ev.AcceptedToken > 0 {
			msg += fmt.Sprintf(" (done under token %d)", ev.AcceptedToken)
		}
		if ev.Holder != "" {
			msg += ", by " + ev.Holder
		}
		return msg
	case history.Frozen, history.Limited, history.Thawed:
		// Holder is who set or removed the limit; Count a limit's N.
		msg := string(ev.Kind)
		if ev.Kind == history.Limited {
			msg = fmt.Sprintf("limited to %d", ev.Count)
		}
		if ev.Holder != "" {
			msg += " by " + ev.Holder
		}
		if ev.Reason != "" {
			msg += ": " + ev.Reason
		}
		return msg
	case history.StaleRefused:
		msg := fmt.Sprintf("token %d refused, %d accepted", ev.Token, ev.AcceptedToken)
		if ev.Key != "" {
			msg = "key " + strconv.Quote(ev.Key) + ": " + msg
		}
		return msg
	}
	if ev.Error != "" {
		return who + ": " + ev.Error
	}
	return who
}

func roundDur(d time.Duration) time.Duration {
	switch {
	case d >= time.Minute:
		return d.Round(time.Second)
	case d >= time.Second:
		return d.Round(100 * time.Millisecond)
	default:
		return d.Round(time.Millisecond)
	}
}

// View draws the lock (r is its row, nil when the coordinator no longer
// lists it) and the timeline: exactly height lines of at most width cells.
func (m *Model) View(r *store.Row, now time.Time) string {
	if m.width == 0 || m.height == 0 {
		return ""
	}
	lines := m.header(r, now)
	m.vp.Height = max(m.height-len(lines), 0)
	for len(lines) > m.height {
		lines = lines[:m.height]
	}
	if len(lines) < m.height {
		body := m.vp.View()
		lines = append(lines, body)
		out := strings.Join(lines, "\n")
		return padLines(out, m.height)
	}
	return strings.Join(lines, "\n")
}

// Sync fits the timeline to the room the header leaves for row r at now
// (the limit, the queue and the waits take lines when there are any), so
// that scrolling reaches its last line. The dashboard calls it whenever
// the row or the history changes.
func (m *Model) Sync(r *store.Row, now time.Time) {
	if m.width == 0 {
		return
	}
	m.vp.Height = max(m.height-len(m.header(r, now)), 0)
}

// maxQueue is how many waiters the details name; the others are counted.
const maxQueue = 3

// labelW is the width of the field names.
const labelW = 10

// header is the lines above the timeline.
func (m *Model) header(r *store.Row, now time.Time) []string {
	s := m.styles
	w := m.width
	lines := make([]string, 0, headerLines+maxQueue+4)

	// Line 1: the name and the state.
	state := "not listed"
	stateStyle := s.Free
	if r != nil {
		st := r.State(now)
		state = r.Label(now)
		switch {
		case r.Info.Limit != nil:
			stateStyle = s.Limit
		case st == store.Held:
			stateStyle = s.Held
		case st == store.Expiring:
			stateStyle = s.Expiring
		}
	}
	nameW := max(w-2-len(state)-2, 1)
	lines = append(lines, "  "+s.Title.Render(format.Fit(m.name, nameW))+"  "+stateStyle.Render(state))

	half := max((w-2)/2, 1)
	pair := func(l1, v1, l2, v2 string) string {
		const lw = labelW
		if l2 == "" {
			return "  " + s.Label.Render(format.Fit(l1, lw)) + format.Fit(v1, max(w-2-lw, 0))
		}
		left := s.Label.Render(format.Fit(l1, lw)) + format.Fit(v1, max(half-lw, 0))
		right := ""
		{
			right = s.Label.Render(format.Fit(l2, lw)) + format.Fit(v2, max(w-2-half-lw, 0))
		}
		return "  " + left + right
	}
	var (
		holder, token, lease, ttl, acquired, held, waiters = "-", "-", "-", "-", "-", "-", "-"
		renewals, failures, stale                          = "-", "-", "-"
		process                                            = "-"
	)
	if r != nil {
		i := r.Info
		token = "-"
		if i.LastToken > 0 {
			token = fmt.Sprintf("last %d", i.LastToken)
		}
		if i.Held {
			holder = i.Holder
			token = strconv.FormatUint(i.Token, 10)
			if i.LastToken > i.Token {
				token += fmt.Sprintf(" (last %d)", i.LastToken)
			}
			lease = i.LeaseID
			left := r.TTLLeft(now)
			barW := min(max(half-10-18, 4), 20)
			full, empty := format.Bar(left, i.TTL, barW)
			ttl = full + empty + " " + format.Duration(format.Ceil(left)) + " of " + format.Duration(i.TTL)
			renewals = strconv.Itoa(r.Renewals)
			if !i.AcquiredAt.IsZero() {
				acquired = i.AcquiredAt.In(m.loc).Format(acquiredLayout)
				held = format.Duration(i.HeldFor(now))
			}
		}
		waiters = strconv.Itoa(i.Waiters)
		if !m.NoHistory && r.Failures >= 0 {
			failures, stale = strconv.Itoa(r.Failures), strconv.Itoa(r.Stale)
		}
		if p := i.Process; p != nil {
			var ps []string
			for _, pid := range p.PIDs {
				ps = append(ps, strconv.Itoa(pid))
			}
			process = "pids " + strings.Join(ps, ",")
			if p.PGID > 0 {
				process += fmt.Sprintf(", pgid %d", p.PGID)
			}
		}
	}
	lines = append(lines,
		pair("holder", holder, "token", token),
		pair("lease", lease, "ttl", ttl),
		pair("acquired", acquired, "held for", held),
		pair("renewals", renewals, "waiters", waiters),
		pair("failures", failures, "stale", stale),
	)
	if m.Group != "" {
		lines = append(lines, pair("process", process, "group", m.Group))
	} else {
		lines = append(lines, pair("process", process, "", ""))
	}
	if r != nil && r.Info.Slots > 1 {
		lines = append(lines, m.holderLines(r.Info, now)...)
	}
	if r != nil && r.Info.Limit != nil {
		lines = append(lines, pair("limit", m.limitText(*r.Info.Limit), "", ""))
	}
	if r != nil {
		lines = append(lines, m.queueLines(r.Info.Queue, now)...)
	}
	lines = append(lines, m.contentionLines()...)
	title := "── history, newest first "
	lines = append(lines, s.Rule.Render(format.Fit("  "+title+strings.Repeat("─", max(w-2-len([]rune(title)), 0)), w)))
	return lines
}

// limitText names the limit: what it does, its scope, who set it, when and
// why.
func (m *Model) limitText(l coord.Limit) string {
	what := "frozen"
	if !l.Frozen() {
		what = fmt.Sprintf("limit %d", l.Max)
	}
	scope := "this lock"
	if l.Prefix {
		scope = fmt.Sprintf("prefix %q", l.Name)
	}
	v := what + " (" + scope + ")"
	if l.By != "" {
		v += " by " + l.By
	}
	if !l.At.IsZero() {
		v += " at " + l.At.In(m.loc).Format(TimeLayout)
	}
	if l.Reason != "" {
		v += ": " + l.Reason
	}
	return v
}

// holderLines name a semaphore's holders, oldest first (the fields above
// are the oldest's): slot, holder, token, time left, held for.
func (m *Model) holderLines(i coord.LockInfo, now time.Time) []string {
	s := m.styles
	lines := []string{"  " + s.Label.Render(format.Fit("slots", labelW)) +
		format.Fit(fmt.Sprintf("%d of %d held", len(i.Holders), i.Slots), max(m.width-2-labelW, 0))}
	for n, h := range i.Holders {
		if n == maxQueue {
			lines = append(lines, "  "+strings.Repeat(" ", labelW)+s.Label.Render(format.Fit(fmt.Sprintf("and %d more", len(i.Holders)-maxQueue), max(m.width-2-labelW, 0))))
			break
		}
		v := fmt.Sprintf("slot %d: %s, token %d", h.Slot, h.Holder, h.Token)
		if h.TTL > 0 {
			v += ", " + format.Duration(format.Ceil(max(h.TTLLeft, 0))) + " of " + format.Duration(h.TTL) + " left"
		}
		if !h.AcquiredAt.IsZero() {
			v += ", held " + format.Duration(max(now.Sub(h.AcquiredAt), 0))
		}
		lines = append(lines, "  "+strings.Repeat(" ", labelW)+format.Fit(v, max(m.width-2-labelW, 0)))
	}
	return lines
}

// queueLines names who waits, first served first: place, holder, how long
// and since when, and its lease (etcd) or process (local).
func (m *Model) queueLines(q []coord.Waiter, now time.Time) []string {
	s := m.styles
	var lines []string
	for i, wt := range q {
		if i == maxQueue {
			lines = append(lines, "  "+strings.Repeat(" ", labelW)+s.Label.Render(format.Fit(fmt.Sprintf("and %d more", len(q)-maxQueue), max(m.width-2-labelW, 0))))
			break
		}
		v := fmt.Sprintf("%d. %s", i+1, wt.Holder)
		if !wt.Since.IsZero() {
			v += fmt.Sprintf(", waiting %s (since %s)", format.Duration(max(now.Sub(wt.Since), 0)), wt.Since.In(m.loc).Format("15:04:05"))
		}
		switch {
		case wt.LeaseID != "":
			v += ", lease " + wt.LeaseID
		case wt.PID != 0:
			v += fmt.Sprintf(", pid %d", wt.PID)
		}
		label := ""
		if i == 0 {
			label = "queue"
		}
		lines = append(lines, "  "+s.Label.Render(format.Fit(label, labelW))+format.Fit(v, max(m.width-2-labelW, 0)))
	}
	return lines
}

// contentionLines draws the waits beside the holds of the timeline (the
// figures fence show prints, from package contention), with sparklines of
// the recent ones on one scale.
func (m *Model) contentionLines() []string {
	if m.NoHistory || !m.loaded || m.err != nil || m.sum.Empty() {
		return nil
	}
	s := m.styles
	top := m.sum.Top()
	row := func(label string, d contention.Durations) string {
		v := "none"
		if d.Count > 0 {
			v = fmt.Sprintf("%-20s n=%-3d median %-6s max %-6s total %s", contention.Sparkline(d.Recent, top), d.Count,
				roundDur(d.Median), roundDur(d.Max), roundDur(d.Total))
		}
		return "  " + s.Label.Render(format.Fit(label, labelW)) + format.Fit(v, max(m.width-2-labelW, 0))
	}
	lines := []string{row("waits", m.sum.Wait), row("holds", m.sum.Hold)}
	if m.sum.Bottleneck() {
		lines = append(lines, "  "+strings.Repeat(" ", labelW)+s.Bad.Render(format.Fit("waits exceed holds: the lock is the bottleneck", max(m.width-2-labelW, 0))))
	}
	return lines
}

// padLines makes s exactly n lines long.
func padLines(s string, n int) string {
	got := strings.Count(s, "\n") + 1
	if got > n {
		parts := strings.SplitN(s, "\n", n+1)
		return strings.Join(parts[:n], "\n")
	}
	return s + strings.Repeat("\n", n-got)
}
