// Package details draws one lock: its holder, token, lease and counters,
// live from the dashboard's rows, and its event timeline from the
// coordinator's history, newest first, in a scrolling viewport.
package details

import (
	"cmp"
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
	return Model{styles: s, loc: cmp.Or(loc, time.Local), vp: viewport.New(0, 0)}
}

// Open shows lock name, with its timeline not loaded yet.
func (m *Model) Open(name string) {
	m.name = name
	m.events, m.err, m.loaded = nil, nil, false
	m.sum = contention.Summary{}
	m.render()
	m.vp.GotoTop()
}

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
// history.Store.History returns them, or the error that reading them
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
		lines = []string{s.Dim.Render(format.Fit("  this coordinator keeps no history", m.width))}
	case !m.loaded:
		lines = []string{s.Dim.Render(format.Fit("  loading…", m.width))}
	case m.err != nil:
		lines = []string{s.Bad.Render(format.Fit("  history: "+m.err.Error(), m.width))}
	case len(m.events) == 0:
		lines = []string{s.Dim.Render(format.Fit("  no events recorded", m.width))}
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
	return "  " + s.Dim.Render(ts) + "  " + kind + " " + format.Fit(Describe(ev), rest)
}

// Describe says what an event means, after its kind: who (token and
// holder), and what each kind adds; an event of another kind says who,
// and its error.
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
		return describeRenewalFailed(ev, who)
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
		return describeSkipped(ev)
	case history.Frozen, history.Limited, history.Thawed:
		return describeLimit(ev)
	case history.StaleRefused:
		return describeStaleRefused(ev)
	}
	if ev.Error != "" {
		return who + ": " + ev.Error
	}
	return who
}

// describeRenewalFailed: how many renewals failed, and the last error.
func describeRenewalFailed(ev history.Event, who string) string {
	n := max(ev.Count, 1)
	msg := fmt.Sprintf("%s: %d failed renewal", who, n)
	if n > 1 {
		msg += "s"
	}
	if ev.Error != "" {
		msg += ", last: " + ev.Error
	}
	return msg
}

// describeSkipped: a --once key found done, under which token, by whom.
func describeSkipped(ev history.Event) string {
	msg := fmt.Sprintf("key %s: done already, nothing run", strconv.Quote(ev.Key))
	if ev.AcceptedToken > 0 {
		msg += fmt.Sprintf(" (done under token %d)", ev.AcceptedToken)
	}
	if ev.Holder != "" {
		msg += ", by " + ev.Holder
	}
	return msg
}

// describeLimit: a freeze, a limit (Count is its N) or a thaw; Holder is
// who set or removed it.
func describeLimit(ev history.Event) string {
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
}

// describeStaleRefused: the token refused and the one accepted, and for
// which --once key.
func describeStaleRefused(ev history.Event) string {
	msg := fmt.Sprintf("token %d refused, %d accepted", ev.Token, ev.AcceptedToken)
	if ev.Key != "" {
		msg = "key " + strconv.Quote(ev.Key) + ": " + msg
	}
	return msg
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
	if len(lines) < m.height {
		lines = append(lines, m.vp.View())
	}
	return format.Block(strings.Join(lines, "\n"), m.width, m.height)
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

// header is the lines above the timeline: the name and state, the fields
// in pairs, a semaphore's holders, the limit, the queue, the waits, and
// the timeline's rule.
func (m *Model) header(r *store.Row, now time.Time) []string {
	w := m.width
	lines := make([]string, 0, headerLines+maxQueue+4)
	lines = append(lines, m.titleLine(r, now))
	half := max((w-2)/2, 1)
	v := m.values(r, now, half)
	for _, p := range [][2]string{{"holder", "token"}, {"lease", "ttl"}, {"acquired", "held for"}, {"renewals", "waiters"}, {"failures", "stale"}} {
		lines = append(lines, m.pair(half, p[0], cmp.Or(v[p[0]], "-"), p[1], cmp.Or(v[p[1]], "-")))
	}
	group := ""
	if m.Group != "" {
		group = "group"
	}
	lines = append(lines, m.pair(half, "process", cmp.Or(v["process"], "-"), group, m.Group))
	if r != nil {
		lines = append(lines, m.rowLines(r.Info, now)...)
	}
	lines = append(lines, m.contentionLines()...)
	title := "── history, newest first "
	return append(lines, m.styles.Dim.Render(format.Fit("  "+title+strings.Repeat("─", max(w-2-len([]rune(title)), 0)), w)))
}

// titleLine is the lock's name and its state ("not listed" when r is nil).
func (m *Model) titleLine(r *store.Row, now time.Time) string {
	s := m.styles
	state := "not listed"
	stateStyle := s.Dim
	if r != nil {
		state = r.Label(r.State(now))
		stateStyle = s.State(r.Info.Limit != nil, r.State(now))
	}
	nameW := max(m.width-2-len(state)-2, 1)
	return "  " + s.Accent.Render(format.Fit(m.name, nameW)) + "  " + stateStyle.Render(state)
}

// pair is a line of two fields, label and value, the first in the left
// half; one field alone (l2 "") takes the whole line.
func (m *Model) pair(half int, l1, v1, l2, v2 string) string {
	if l2 == "" {
		return m.field(l1, v1)
	}
	s, lw := m.styles, labelW
	left := s.Dim.Render(format.Fit(l1, lw)) + format.Fit(v1, max(half-lw, 0))
	right := s.Dim.Render(format.Fit(l2, lw)) + format.Fit(v2, max(m.width-2-half-lw, 0))
	return "  " + left + right
}

// field is a line of one field: its label, then v on the rest of the line.
func (m *Model) field(label, v string) string {
	return "  " + m.styles.Dim.Render(format.Fit(label, labelW)) + m.rest(v)
}

// rest fits v to the line after a label; indent stands for the label on
// the lines that follow a field.
func (m *Model) rest(v string) string { return format.Fit(v, max(m.width-2-labelW, 0)) }

var indent = strings.Repeat(" ", 2+labelW)

// values are the header's values for row r (nil: not listed) at now, by
// label, the TTL bar fitting a half line; a value not known is not there.
func (m *Model) values(r *store.Row, now time.Time, half int) map[string]string {
	if r == nil {
		return nil
	}
	i := r.Info
	v := map[string]string{"waiters": strconv.Itoa(i.Waiters)}
	if i.LastToken > 0 {
		v["token"] = fmt.Sprintf("last %d", i.LastToken)
	}
	if !m.NoHistory && r.Failures >= 0 {
		v["failures"], v["stale"] = strconv.Itoa(r.Failures), strconv.Itoa(r.Stale)
	}
	if i.Process != nil {
		v["process"] = processText(*i.Process)
	}
	if !i.Held {
		return v
	}
	v["holder"], v["lease"], v["renewals"] = i.Holder, i.LeaseID, strconv.Itoa(r.Renewals)
	v["token"] = strconv.FormatUint(i.Token, 10)
	if i.LastToken > i.Token {
		v["token"] += fmt.Sprintf(" (last %d)", i.LastToken)
	}
	left := r.TTLLeft(now)
	full, empty := format.Bar(left, i.TTL, min(max(half-10-18, 4), 20))
	v["ttl"] = full + empty + " " + format.Duration(format.Ceil(left)) + " of " + format.Duration(i.TTL)
	if !i.AcquiredAt.IsZero() {
		v["acquired"] = i.AcquiredAt.In(m.loc).Format(acquiredLayout)
		v["held for"] = format.Duration(i.HeldFor(now))
	}
	return v
}

// processText is "pids 1,2, pgid 1".
func processText(p coord.ProcessInfo) string {
	ps := make([]string, 0, len(p.PIDs))
	for _, pid := range p.PIDs {
		ps = append(ps, strconv.Itoa(pid))
	}
	v := "pids " + strings.Join(ps, ",")
	if p.PGID > 0 {
		v += fmt.Sprintf(", pgid %d", p.PGID)
	}
	return v
}

// rowLines are the lines a listed lock adds when it has them: a
// semaphore's holders, the limit, the queue.
func (m *Model) rowLines(i coord.LockInfo, now time.Time) []string {
	var lines []string
	if i.Slots > 1 {
		lines = append(lines, m.holderLines(i, now)...)
	}
	if i.Limit != nil {
		lines = append(lines, m.field("limit", m.limitText(*i.Limit)))
	}
	return append(lines, m.queueLines(i.Queue, now)...)
}

// limitText names the limit: what it does, its scope, who set it, when and
// why.
func (m *Model) limitText(l coord.Limit) string {
	what := "frozen"
	if l.Max != 0 {
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
	var vs []string
	for _, h := range i.Holders[:min(len(i.Holders), maxQueue)] {
		v := fmt.Sprintf("slot %d: %s, token %d", h.Slot, h.Holder, h.Token)
		if h.TTL > 0 {
			v += ", " + format.Duration(format.Ceil(max(h.TTLLeft, 0))) + " of " + format.Duration(h.TTL) + " left"
		}
		if !h.AcquiredAt.IsZero() {
			v += ", held " + format.Duration(max(now.Sub(h.AcquiredAt), 0))
		}
		vs = append(vs, v)
	}
	return append([]string{m.field("slots", fmt.Sprintf("%d of %d held", len(i.Holders), i.Slots))}, m.listLines("", vs, len(i.Holders))...)
}

// queueLines names who waits, first served first: place, holder, how long
// and since when, and its lease (etcd) or process (local).
func (m *Model) queueLines(q []coord.Waiter, now time.Time) []string {
	var vs []string
	for i, wt := range q[:min(len(q), maxQueue)] {
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
		vs = append(vs, v)
	}
	return m.listLines("queue", vs, len(q))
}

// listLines is a field of a value a line, the first of n values (vs) on
// the label's line, and the count of those not named.
func (m *Model) listLines(label string, vs []string, n int) []string {
	var lines []string
	for _, v := range vs {
		lines = append(lines, m.field(label, v))
		label = ""
	}
	if n > len(vs) {
		lines = append(lines, indent+m.styles.Dim.Render(m.rest(fmt.Sprintf("and %d more", n-len(vs)))))
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
	top := m.sum.Top()
	row := func(label string, d contention.Durations) string {
		v := "none"
		if d.Count > 0 {
			v = fmt.Sprintf("%-20s n=%-3d median %-6s max %-6s total %s", contention.Sparkline(d.Recent, top), d.Count,
				roundDur(d.Median), roundDur(d.Max), roundDur(d.Total))
		}
		return m.field(label, v)
	}
	lines := []string{row("waits", m.sum.Wait), row("holds", m.sum.Hold)}
	if m.sum.Bottleneck() {
		lines = append(lines, indent+m.styles.Bad.Render(m.rest("waits exceed holds: the lock is the bottleneck")))
	}
	return lines
}
