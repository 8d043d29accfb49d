package tui

import (
	"fmt"

	"github.com/charmbracelet/bubbles/key"
	tea "github.com/charmbracelet/bubbletea"

	"github.com/fence-dev/fence/tui/keys"
)

// A key goes through two decisions, both pure functions of the model's
// state: who reads it (keyReaderOf), and, for a screen, what it does there
// (keyAction). onKey then runs the one handler they chose.

// keyReader is who reads a key.
type keyReader uint8

const (
	// readerInterrupt: ctrl+c quits from anywhere, also while typing a
	// filter or answering a question.
	readerInterrupt keyReader = iota
	// readerRevokeAnswer: a revoke asked first; y does it, any other key
	// cancels it.
	readerRevokeAnswer
	// readerLimitAnswer: a freeze or a thaw asked first; the same.
	readerLimitAnswer
	// readerFilter: the filter input takes every key while it is typed.
	readerFilter
	// readerScreen: the screen in view (table, details, help) does.
	readerScreen
)

// keyReaderOf is who reads a key: interrupt says it is the interrupt key,
// the others what the model is doing.
func keyReaderOf(interrupt, askingRevoke, askingLimit, filtering bool) keyReader {
	switch {
	case interrupt:
		return readerInterrupt
	case askingRevoke:
		return readerRevokeAnswer
	case askingLimit:
		return readerLimitAnswer
	case filtering:
		return readerFilter
	}
	return readerScreen
}

// action is what a key does on a screen.
type action string

const (
	actNone action = ""
	actQuit action = "quit"

	// The table.
	actUp          action = "up"
	actDown        action = "down"
	actPageUp      action = "page up"
	actPageDown    action = "page down"
	actTop         action = "top"
	actBottom      action = "bottom"
	actOpenDetails action = "open details"
	actFilter      action = "filter"
	actClearFilter action = "clear filter"
	actSort        action = "sort"
	actReverse     action = "reverse"
	actRevoke      action = "revoke"
	actFreeze      action = "freeze"
	actThaw        action = "thaw"
	actHelp        action = "help"

	// The details (revoke, freeze and thaw act on the lock shown).
	actCloseDetails action = "close details"
	actDetailsHelp  action = "help from details"
	actScrollUp     action = "scroll up"
	actScrollDown   action = "scroll down"
	actScrollPgUp   action = "scroll page up"
	actScrollPgDown action = "scroll page down"
	actScrollTop    action = "scroll top"
	actScrollBottom action = "scroll bottom"

	// The help.
	actCloseHelp action = "close help"
)

// binding is one key of a screen and what it does.
type binding struct {
	key key.Binding
	act action
}

// screenKeys is the keys of screen md, in the order they are matched: the
// first binding that matches a key says what it does.
func screenKeys(k keys.KeyMap, md mode) []binding {
	switch md {
	case modeHelp:
		return []binding{{k.Quit, actQuit}, {k.Help, actCloseHelp}, {k.Back, actCloseHelp}}
	case modeDetails:
		return []binding{
			{k.Quit, actQuit}, {k.Back, actCloseDetails}, {k.Details, actCloseDetails}, {k.Help, actDetailsHelp},
			{k.Up, actScrollUp}, {k.Down, actScrollDown}, {k.PageUp, actScrollPgUp}, {k.PageDown, actScrollPgDown},
			{k.Top, actScrollTop}, {k.Bottom, actScrollBottom},
			{k.Revoke, actRevoke}, {k.Freeze, actFreeze}, {k.Thaw, actThaw},
		}
	}
	return []binding{
		{k.Quit, actQuit}, {k.Up, actUp}, {k.Down, actDown}, {k.PageUp, actPageUp}, {k.PageDown, actPageDown},
		{k.Top, actTop}, {k.Bottom, actBottom}, {k.Details, actOpenDetails}, {k.Filter, actFilter},
		{k.Back, actClearFilter}, {k.Sort, actSort}, {k.Reverse, actReverse},
		{k.Revoke, actRevoke}, {k.Freeze, actFreeze}, {k.Thaw, actThaw}, {k.Help, actHelp},
	}
}

// keyAction is what key msg does on screen md (actNone: nothing).
func keyAction(k keys.KeyMap, md mode, msg tea.KeyMsg) action {
	for _, b := range screenKeys(k, md) {
		if key.Matches(msg, b.key) {
			return b.act
		}
	}
	return actNone
}

// keyHandlers runs each action. A handler that moves the table's view
// returns historyBatch: rows that scrolled into view get their counters
// soon, not at the next tick.
var keyHandlers = map[action]func(*Model) tea.Cmd{
	actQuit: (*Model).quit,

	actUp:          batched(func(m *Model) { m.table.Move(m.store, -1) }),
	actDown:        batched(func(m *Model) { m.table.Move(m.store, 1) }),
	actPageUp:      batched(func(m *Model) { m.table.Page(m.store, -1) }),
	actPageDown:    batched(func(m *Model) { m.table.Page(m.store, 1) }),
	actTop:         batched(func(m *Model) { m.table.Top(m.store) }),
	actBottom:      batched(func(m *Model) { m.table.Bottom(m.store) }),
	actOpenDetails: (*Model).openDetails,
	actFilter:      (*Model).startFilter,
	actClearFilter: batched((*Model).clearFilter),
	actSort:        batched(func(m *Model) { m.sortBy(true) }),
	actReverse:     batched(func(m *Model) { m.sortBy(false) }),
	actRevoke:      onScreen(func(m *Model) { m.askRevoke(m.shown()) }),
	actFreeze:      onScreen(func(m *Model) { m.askLimit(m.shown(), true) }),
	actThaw:        onScreen(func(m *Model) { m.askLimit(m.shown(), false) }),
	actHelp:        batched(func(m *Model) { m.mode, m.prevDetails = modeHelp, false }),

	actCloseDetails: none(func(m *Model) { m.mode, m.prevDetails = modeTable, false }),
	actDetailsHelp:  none(func(m *Model) { m.mode, m.prevDetails = modeHelp, true }),
	actScrollUp:     none(func(m *Model) { m.details.ScrollDown(-1) }),
	actScrollDown:   none(func(m *Model) { m.details.ScrollDown(1) }),
	actScrollPgUp:   none(func(m *Model) { m.details.PageDown(-1) }),
	actScrollPgDown: none(func(m *Model) { m.details.PageDown(1) }),
	actScrollTop:    none(func(m *Model) { m.details.Top() }),
	actScrollBottom: none(func(m *Model) { m.details.Bottom() }),

	actCloseHelp: none((*Model).closeHelp),
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

// onScreen is a step of the table (batched) or of the details (none).
func onScreen(f func(*Model)) func(*Model) tea.Cmd {
	return func(m *Model) tea.Cmd {
		if m.mode == modeDetails {
			return none(f)(m)
		}
		return batched(f)(m)
	}
}

func (m *Model) onKey(msg tea.KeyMsg) tea.Cmd {
	switch keyReaderOf(key.Matches(msg, m.keys.Interrupt), m.confirm != nil, m.confirmLimit != nil, m.filtering) {
	case readerInterrupt:
		return m.quit()
	case readerRevokeAnswer:
		return m.answerRevoke(key.Matches(msg, m.keys.Yes))
	case readerLimitAnswer:
		return m.answerLimit(key.Matches(msg, m.keys.Yes))
	case readerFilter:
		return m.filterKey(msg)
	}
	m.flash = ""
	if h := keyHandlers[keyAction(m.keys, m.mode, msg)]; h != nil {
		return h(m)
	}
	if m.mode == modeTable {
		return m.historyBatch()
	}
	return nil
}

// answerRevoke ends the revoke question: yes revokes.
func (m *Model) answerRevoke(yes bool) tea.Cmd {
	t := *m.confirm
	m.confirm = nil
	if !yes {
		m.setFlash("revoke cancelled", false)
		return nil
	}
	m.revoking = true
	m.setFlash(fmt.Sprintf("revoking %s…", t.name), false)
	return m.revokeCmd(t)
}

// answerLimit ends the freeze or thaw question: yes does it.
func (m *Model) answerLimit(yes bool) tea.Cmd {
	t := *m.confirmLimit
	m.confirmLimit = nil
	if !yes {
		m.setFlash(t.verb("")+" cancelled", false)
		return nil
	}
	m.limiting = true
	m.setFlash(fmt.Sprintf("%s %s…", t.verb("ing"), t.scope()), false)
	return m.limitCmd(t)
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

// shown is the lock the keys act on: the one in the details, else the
// selected row.
func (m *Model) shown() string {
	if m.mode == modeDetails {
		return m.details.Name()
	}
	return m.table.Selected()
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

// closeHelp goes back to where the help was opened from.
func (m *Model) closeHelp() {
	m.mode = modeTable
	if m.details.Name() != "" && m.prevDetails {
		m.mode = modeDetails
	}
}
