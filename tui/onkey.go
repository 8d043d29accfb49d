package tui

import (
	"github.com/charmbracelet/bubbles/key"
	tea "github.com/charmbracelet/bubbletea"
)

// A key goes to the first of these that is there: ctrl+c, which quits
// from anywhere; a question (answer); the filter input while it is typed;
// the screen in view (table, details, help), whose bindings say what the
// key does (keyAction).

// binding is one key of a screen, what it does (act, for the tests and
// the reader) and the step that does it.
type binding struct {
	key key.Binding
	act string
	run func(*Model) tea.Cmd
}

// screenKeys is the keys of screen md, in the order they are matched: the
// first binding that matches a key says what it does. A step that moves
// the table's view is batched: rows that scrolled into view get their
// counters soon, not at the next tick.
func screenKeys(k keyMap, md mode) []binding {
	quit := binding{k.Quit, "quit", (*Model).quit}
	switch md {
	case modeHelp:
		closeHelp := none(func(m *Model) { m.mode = m.helpFrom }) // back to where it was opened from
		return []binding{quit, {k.Help, "close help", closeHelp}, {k.Back, "close help", closeHelp}}
	case modeDetails:
		return []binding{
			quit,
			{k.Back, "close details", none(func(m *Model) { m.mode = modeTable })},
			{k.Details, "close details", none(func(m *Model) { m.mode = modeTable })},
			{k.Help, "help from details", none(func(m *Model) { m.helpFrom, m.mode = modeDetails, modeHelp })},
			{k.Up, "scroll up", none(func(m *Model) { m.details.ScrollDown(-1) })},
			{k.Down, "scroll down", none(func(m *Model) { m.details.ScrollDown(1) })},
			{k.PageUp, "scroll page up", none(func(m *Model) { m.details.PageDown(-1) })},
			{k.PageDown, "scroll page down", none(func(m *Model) { m.details.PageDown(1) })},
			{k.Top, "scroll top", none(func(m *Model) { m.details.Top() })},
			{k.Bottom, "scroll bottom", none(func(m *Model) { m.details.Bottom() })},
			{k.Revoke, "revoke", none(func(m *Model) { m.ask(m.details.Name(), "revoke") })},
			{k.Freeze, "freeze", none(func(m *Model) { m.ask(m.details.Name(), "freeze") })},
			{k.Thaw, "thaw", none(func(m *Model) { m.ask(m.details.Name(), "thaw") })},
		}
	}
	return []binding{
		quit,
		{k.Up, "up", batched(func(m *Model) { m.table.Move(m.store, -1) })},
		{k.Down, "down", batched(func(m *Model) { m.table.Move(m.store, 1) })},
		{k.PageUp, "page up", batched(func(m *Model) { m.table.Page(m.store, -1) })},
		{k.PageDown, "page down", batched(func(m *Model) { m.table.Page(m.store, 1) })},
		{k.Top, "top", batched(func(m *Model) { m.table.Top(m.store) })},
		{k.Bottom, "bottom", batched(func(m *Model) { m.table.Bottom(m.store) })},
		{k.Details, "open details", (*Model).openDetails},
		{k.Filter, "filter", (*Model).startFilter},
		{k.Back, "clear filter", batched((*Model).clearFilter)},
		{k.Sort, "sort", batched(func(m *Model) { m.sortBy(true) })},
		{k.Reverse, "reverse", batched(func(m *Model) { m.sortBy(false) })},
		{k.Revoke, "revoke", batched(func(m *Model) { m.ask(m.table.Selected(), "revoke") })},
		{k.Freeze, "freeze", batched(func(m *Model) { m.ask(m.table.Selected(), "freeze") })},
		{k.Thaw, "thaw", batched(func(m *Model) { m.ask(m.table.Selected(), "thaw") })},
		{k.Help, "help", batched(func(m *Model) { m.helpFrom, m.mode = modeTable, modeHelp })},
	}
}

// keyAction is the binding key msg matches on screen md; its run is nil
// when none does.
func keyAction(k keyMap, md mode, msg tea.KeyMsg) binding {
	for _, b := range screenKeys(k, md) {
		if key.Matches(msg, b.key) {
			return b
		}
	}
	return binding{}
}

// batched is a table step, followed by the history counters of the rows in
// view.
func batched(f func(*Model)) func(*Model) tea.Cmd {
	return func(m *Model) tea.Cmd { f(m); return m.historyBatch() }
}

// none is a step that reads nothing.
func none(f func(*Model)) func(*Model) tea.Cmd {
	return func(m *Model) tea.Cmd { f(m); return nil }
}

func (m *Model) onKey(msg tea.KeyMsg) tea.Cmd {
	switch {
	case key.Matches(msg, m.keys.Interrupt):
		return m.quit()
	case m.asking != nil:
		return m.answer(key.Matches(msg, m.keys.Yes))
	case m.filtering:
		return m.filterKey(msg)
	}
	m.flash = ""
	if b := keyAction(m.keys, m.mode, msg); b.run != nil {
		return b.run(m)
	}
	if m.mode == modeTable {
		return m.historyBatch()
	}
	return nil
}

// question is what the bottom line asks before a revoke, a freeze or a
// thaw: yes (y) runs do, and shows doing meanwhile; any other key shows
// "what cancelled".
type question struct {
	text, what, doing string
	do                tea.Cmd
}

// answer ends the question: yes does it.
func (m *Model) answer(yes bool) tea.Cmd {
	q := *m.asking
	m.asking = nil
	if !yes {
		m.setFlash(q.what+" cancelled", false)
		return nil
	}
	m.setFlash(q.doing, false)
	m.changing = true
	return q.do
}

// filterKey is a key typed in the filter input: enter keeps the filter,
// esc clears it (the selection stays where it was), the others edit it.
func (m *Model) filterKey(msg tea.KeyMsg) tea.Cmd {
	switch {
	case key.Matches(msg, m.keys.Apply):
		m.filtering = false
		m.filter.Blur()
	case msg.Type == tea.KeyEsc:
		m.filtering = false
		m.filter.Blur()
		m.filter.SetValue("")
		m.store.SetFilter("")
	default:
		var cmd tea.Cmd
		m.filter, cmd = m.filter.Update(msg)
		if m.filter.Value() != m.store.Filter() {
			m.store.SetFilter(m.filter.Value())
			m.table.Top(m.store)
		}
		m.changed()
		return cmd
	}
	m.changed()
	return nil
}

func (m *Model) openDetails() tea.Cmd {
	name := m.table.Selected()
	if name == "" {
		return nil
	}
	m.mode = modeDetails
	m.details.Open(name)
	m.details.Sync(m.store.Get(name), m.now)
	return m.fetchDetails()
}

func (m *Model) startFilter() tea.Cmd {
	m.filtering = true
	m.filter.SetValue(m.store.Filter())
	m.filter.CursorEnd()
	return m.filter.Focus()
}

func (m *Model) clearFilter() {
	if m.store.Filter() != "" {
		m.filter.SetValue("")
		m.store.SetFilter("")
		m.changed()
	}
}

// sortBy sorts by the next column (next), or reverses the order; a new
// order is read from its top.
func (m *Model) sortBy(next bool) {
	k, rev := m.store.Sort()
	if next {
		k = k.Next()
	} else {
		rev = !rev
	}
	m.store.SetSort(k, rev, m.now)
	m.table.Top(m.store)
	m.changed()
}
