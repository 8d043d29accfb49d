package tui

import (
	"errors"
	"fmt"
	"time"

	tea "github.com/charmbracelet/bubbletea"

	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/tui/internal/store"
)

// Update applies one message; the reads are the commands it returns.
func (m *Model) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	m.now = m.opts.Now()
	switch msg := msg.(type) {
	case tea.WindowSizeMsg:
		m.setSize(msg.Width, msg.Height)
		return m, nil
	case tea.KeyMsg:
		return m, m.onKey(msg)
	case eventsMsg:
		return m, m.onEvents(msg)
	case listMsg:
		return m, m.onList(msg)
	case inspectMsg:
		delete(m.inspecting, msg.name)
		m.onRead(msg)
		return m, nil
	case historyMsg:
		return m, m.onHistory(msg)
	case detailsMsg:
		return m, m.onDetails(msg)
	case doneMsg:
		m.onDone(msg)
		return m, nil
	case tickMsg:
		return m, m.onTick()
	}
	return m, nil
}

func (m *Model) setSize(w, h int) {
	m.width, m.height = w, h
	body := max(h-2, 0) // the status line and the bottom line
	m.table.SetSize(w, body)
	m.details.SetSize(w, body)
	if m.details.Name() != "" {
		m.details.Sync(m.store.Get(m.details.Name()), m.now)
	}
	m.help.Width = w
	m.filter.Width = max(w-2, 1)
	m.table.Sync(m.store)
}

// changed brings the table, the totals and the details up to date after
// the store changed.
func (m *Model) changed() {
	m.table.Sync(m.store)
	m.totals = m.store.Totals()
	if m.mode == modeDetails {
		m.details.Sync(m.store.Get(m.details.Name()), m.now)
	}
}

// noteRead notes how a read went, for the status line.
func (m *Model) noteRead(err error, latency time.Duration) {
	if errors.Is(err, coord.ErrNotHeld) {
		err = nil
	}
	m.readErr = err
	if err == nil {
		m.latency, m.lastOK = latency, m.now
	}
}

// onRead takes in an inspect of a lock: how it went, and the lock when the
// dashboard lists it.
func (m *Model) onRead(msg inspectMsg) {
	m.noteRead(msg.err, msg.latency)
	if msg.err == nil && m.store.Get(msg.name) != nil {
		m.store.Apply(m.now, coord.Event{Info: msg.info})
	}
	m.changed()
}

// probeStall is how long the probe of every tick may be on its way, with
// no other read answered meanwhile, before the coordinator counts as not
// answering (a frozen etcd does not fail a read: it never answers it).
// With a probe every tick (a second), a stall shows within two seconds,
// whatever the refresh period (a list may be seconds away).
const probeStall = time.Second

// unanswered reports whether the coordinator is not answering, and since
// when: the last read failed, or the probe has been on its way for
// probeStall with no read answered since it was asked.
func (m *Model) unanswered() (time.Time, bool) {
	stalled := m.inspecting[probeName] && m.now.Sub(m.probeStart) >= probeStall && !m.lastOK.After(m.probeStart)
	if m.readErr == nil && !stalled {
		return time.Time{}, false
	}
	since := m.lastOK
	if since.IsZero() {
		since = m.probeStart
	}
	return since, !since.IsZero()
}

// startList lists every lock, or asks for another list when one is on its
// way. Events arriving meanwhile are kept and applied after the list, so a
// list read before an event never overwrites it.
func (m *Model) startList() tea.Cmd {
	if m.listing {
		m.relist = true
		return nil
	}
	m.listing = true
	m.pending = m.pending[:0]
	return m.listCmd()
}

func (m *Model) onEvents(msg eventsMsg) tea.Cmd {
	cmds := []tea.Cmd{m.nextEventsCmd()}
	touched := false
	for _, ev := range msg.events {
		switch {
		case ev.Err != nil:
			// The watch is started again; list meanwhile: the table is
			// still worth showing.
			m.watching, m.watchErr = false, ev.Err
			cmds = append(cmds, m.startList())
		case ev.Type == coord.EventReset:
			// The watch started, or lost track. The events after it go to
			// pending: the list will have what the watch missed.
			m.watching, m.watchErr = true, nil
			cmds = append(cmds, m.startList())
		case ev.Info.Name == "":
		case !m.listing:
			m.store.Apply(m.now, ev.Event)
		case len(m.pending) >= maxPending:
			// Too many to keep: the list after this one will have
			// them all.
			m.pending = m.pending[:0]
			m.relist = true
			fallthrough
		default:
			m.pending = append(m.pending, ev.Event)
		}
		touched = touched || m.mode == modeDetails && ev.Info.Name == m.details.Name()
	}
	m.changed()
	if touched {
		cmds = append(cmds, m.fetchDetails())
	}
	return tea.Batch(cmds...)
}

func (m *Model) onList(msg listMsg) tea.Cmd {
	m.listing = false
	m.lastList = m.now
	m.noteRead(msg.err, msg.latency)
	if msg.err == nil {
		m.store.Replace(m.now, msg.infos)
		m.listEvery = max(m.opts.Refresh, 10*msg.latency)
	}
	m.store.Apply(m.now, m.pending...)
	m.pending = m.pending[:0]
	m.changed()
	var cmds []tea.Cmd
	if m.relist {
		m.relist = false
		cmds = append(cmds, m.startList())
	}
	cmds = append(cmds, m.historyBatch())
	return tea.Batch(cmds...)
}

// historyBatch reads the history counters of the rows on screen that are
// older than the refresh period or, when there are none, of the next
// sweepBatch other locks older than the list period, so that sorting by a
// counter sees them all. One batch at a time; the others wait as long as
// the last batch took, so that the sweep reads at most half of the time.
func (m *Model) historyBatch() tea.Cmd {
	if m.hist == nil || m.histBusy {
		return nil
	}
	var names []string
	for _, r := range m.table.Visible(m.store) {
		if r.HistAt.IsZero() || m.now.Sub(r.HistAt) >= m.opts.Refresh {
			names = append(names, r.Info.Name)
		}
	}
	var delay time.Duration
	if len(names) == 0 {
		delay = m.lastBatch
		for _, r := range m.store.All() {
			if len(names) == sweepBatch {
				break
			}
			if r.HistAt.IsZero() || m.now.Sub(r.HistAt) >= m.listEvery {
				names = append(names, r.Info.Name)
			}
		}
	}
	if len(names) == 0 {
		return nil
	}
	m.histBusy = true
	return m.historyCmd(names, delay)
}

// onHistory takes a batch's counters (a lock whose read failed is tried
// again a period later) and reads the next batch.
func (m *Model) onHistory(msg historyMsg) tea.Cmd {
	m.histBusy = false
	m.lastBatch = msg.elapsed
	for _, c := range msg.counts {
		if r := m.store.Get(c.name); c.err != nil && r != nil {
			c.failures, c.stale = r.Failures, r.Stale
		}
		m.store.SetCounts(c.name, c.failures, c.stale, m.now)
	}
	m.changed()
	return m.historyBatch()
}

func (m *Model) fetchDetails() tea.Cmd {
	if m.mode != modeDetails {
		return nil
	}
	if m.detailsBusy {
		m.detailsDirty = true
		return nil
	}
	m.detailsBusy, m.detailsDirty = true, false
	m.detailsAt = m.now
	return m.detailsCmd(m.details.Name())
}

func (m *Model) onDetails(msg detailsMsg) tea.Cmd {
	m.detailsBusy = false
	if m.hist != nil && msg.histErr == nil {
		f, s := countHistory(msg.events)
		m.store.SetCounts(msg.name, f, s, m.now)
	}
	m.onRead(msg.inspectMsg)
	if m.mode != modeDetails || msg.name != m.details.Name() {
		return nil
	}
	if m.hist != nil {
		m.details.SetHistory(msg.events, msg.histErr)
		m.details.Sync(m.store.Get(msg.name), m.now)
	}
	if m.detailsDirty {
		return m.fetchDetails()
	}
	return nil
}

func (m *Model) setFlash(s string, isErr bool) {
	m.flash, m.flashErr, m.flashUntil = s, isErr, m.now.Add(flashFor)
}

func (m *Model) onTick() tea.Cmd {
	cmds := []tea.Cmd{m.after(tickEvery, tickMsg{})}
	m.store.Tick(m.now)
	if m.flash != "" && !m.now.Before(m.flashUntil) {
		m.flash = ""
	}
	if !m.listing && !m.lastList.IsZero() && m.now.Sub(m.lastList) >= m.listEvery {
		cmds = append(cmds, m.startList())
	}
	if !m.inspecting[probeName] {
		m.inspecting[probeName], m.probeStart = true, m.now
		cmds = append(cmds, m.inspectCmd(probeName))
	}
	cmds = append(cmds, m.historyBatch())
	// Re-read the expiring rows on screen: on etcd a renewal shows only
	// to a read, and an operator looking at a lock must not see it expire
	// when it was renewed.
	for _, r := range m.table.Visible(m.store) {
		if len(m.inspecting) >= maxInspect {
			break
		}
		if r.State(m.now) == store.Expiring && !m.inspecting[r.Info.Name] && m.now.Sub(r.ReadAt) >= time.Second {
			m.inspecting[r.Info.Name] = true
			cmds = append(cmds, m.inspectCmd(r.Info.Name))
		}
	}
	if m.mode == modeDetails && m.now.Sub(m.detailsAt) >= m.opts.Refresh {
		cmds = append(cmds, m.fetchDetails())
	}
	m.changed()
	return tea.Batch(cmds...)
}

// quit ends every read and the watch (their contexts derive from m.ctx)
// and the program. The screen is left as it was for the last frame.
func (m *Model) quit() tea.Cmd {
	m.stop()
	return tea.Quit
}

// ask asks before a revoke, a freeze or a thaw (what) of lock name, or
// says why there is nothing to do; one change is on its way at a time. A
// freeze is a lock-scope freeze, as `fence freeze NAME` makes; a thaw
// removes the limit that binds the lock, whatever its scope (the lock's
// own, or a prefix's: the question says which).
func (m *Model) ask(name, what string) {
	r := m.store.Get(name)
	if r == nil {
		return
	}
	i, l := r.Info, r.Info.Limit
	switch {
	case m.changing:
		m.setFlash("a revoke, a freeze or a thaw is on its way", false)
	case what == "revoke" && !i.Held:
		m.setFlash(name+" is free: nothing to revoke", false)
	case what == "freeze" && l != nil && l.Max == 0:
		m.setFlash(fmt.Sprintf("%s is frozen already (%s)", name, l.Scope()), false)
	case what == "thaw" && l == nil:
		m.setFlash(name+" has no limit: nothing to thaw", false)
	case what == "revoke":
		m.asking = &question{what: what, doing: fmt.Sprintf("revoking %s…", name), do: m.revokeCmd(name, i.Token),
			text: fmt.Sprintf("Revoke the lease on %s (holder %s, token %d)? [y/N]", name, i.Holder, i.Token)}
	case what == "freeze":
		scope := coord.Limit{Name: name}
		m.asking = &question{what: what, doing: fmt.Sprintf("freezing %s…", scope.Scope()), do: m.limitCmd(name, true, scope),
			text: fmt.Sprintf("Freeze %s (no new holder until thawed; a holder runs on)? [y/N]", name)}
	default:
		// What the limit does and who set it; the details say when and why.
		brief := "frozen"
		if l.Max != 0 {
			brief = fmt.Sprintf("limit %d", l.Max)
		}
		if l.By != "" {
			brief += " by " + l.By
		}
		text := fmt.Sprintf("Thaw %s (%s)? [y/N]", name, brief)
		if l.Prefix {
			text = fmt.Sprintf("Thaw prefix %q (%s), every lock under it? [y/N]", l.Name, brief)
		}
		m.asking = &question{what: what, doing: fmt.Sprintf("thawing %s…", l.Scope()), do: m.limitCmd(name, false, *l), text: text}
	}
}

// onDone ends a revoke, a freeze or a thaw.
func (m *Model) onDone(msg doneMsg) {
	m.changing = false
	m.setFlash(msg.flash, msg.isErr)
	if msg.read && m.store.Get(msg.info.Name) != nil {
		m.store.Apply(m.now, coord.Event{Info: msg.info})
		m.changed()
	}
}
