package tui

import (
	"fmt"
	"strings"

	"github.com/charmbracelet/bubbles/key"
	"github.com/charmbracelet/x/ansi"

	"github.com/fence-dev/fence/tui/internal/format"
)

// The smallest screen drawn; below it a one-line notice is shown.
const (
	minWidth  = 40
	minHeight = 8
)

// View draws the screen: exactly the terminal's height in lines, none wider
// than it.
func (m *Model) View() string {
	if m.width < minWidth || m.height < minHeight {
		return format.Fit(fmt.Sprintf("fence top needs %dx%d, the terminal is %dx%d", minWidth, minHeight, m.width, m.height), max(m.width, 1))
	}
	var b strings.Builder
	switch m.mode {
	case modeHelp:
		b.WriteString(m.helpView())
	case modeDetails:
		d := m.details
		d.Group = groupSummary(m.store.All(), d.Name())
		b.WriteString(d.View(m.store.Get(d.Name()), m.now))
	default:
		_, m.table.Unconfirmed = m.unanswered()
		b.WriteString(m.table.View(m.store, m.now))
	}
	b.WriteByte('\n')
	b.WriteString(m.statusView())
	b.WriteByte('\n')
	b.WriteString(m.bottomView())
	return b.String()
}

// bottomView is the last line: the revoke question, the filter being
// typed, a message, or the keys.
func (m *Model) bottomView() string {
	s := m.styles
	var line string
	switch {
	case m.asking != nil:
		line = s.Caution.Render(m.asking.text)
	case m.filtering:
		line = m.filter.View()
	case m.flash != "":
		if m.flashErr {
			line = s.Bad.Render(m.flash)
		} else {
			line = m.flash
		}
	default:
		var bindings []key.Binding
		k := m.keys
		switch m.mode {
		case modeDetails:
			bindings = []key.Binding{k.Back, k.Up, k.Down, k.Revoke, k.Freeze, k.Thaw, k.Help, k.Quit}
		case modeHelp:
			bindings = []key.Binding{k.Back, k.Quit}
		default:
			bindings = k.ShortHelp()
		}
		prefix := ""
		if f := m.store.Filter(); f != "" && m.mode == modeTable {
			prefix = s.Accent.Render("/"+f) + s.Dim.Render(" (esc clears) ")
		}
		line = prefix + m.help.ShortHelpView(bindings)
	}
	if ansi.StringWidth(line) > m.width {
		line = ansi.Truncate(line, m.width, "…")
	}
	return line
}

// legend explains the columns on the help screen.
var legend = [][2]string{
	{"STATE", "held; expiring (under a third of the TTL left); free; frozen; limit N"},
	{"TOKEN", "the holder's fencing token; (N): the last token of a free lock"},
	{"TTL", "time left on the lease, counted down since the last read"},
	{"HELD", "how long the current holder has held the lock"},
	{"RENEW", "renewals seen for the current lease"},
	{"FAIL", "renewal failures in the lock's history"},
	{"STALE", "stale tokens refused by guards, from the history"},
}

func (m *Model) helpView() string {
	s := m.styles
	h := max(m.height-2, 0)
	lines := []string{s.Accent.Render(format.Fit("  keys", m.width)), ""}
	for _, l := range strings.Split(m.help.FullHelpView(m.keys.FullHelp()), "\n") {
		lines = append(lines, "  "+l)
	}
	lines = append(lines, "", s.Accent.Render(format.Fit("  columns", m.width)), "")
	for _, l := range legend {
		lines = append(lines, "  "+s.Help.FullKey.Render(format.Fit(l[0], 7))+s.Help.FullDesc.Render(l[1]))
	}
	if m.opts.Warning != "" {
		// In full: a narrow status line may show only its mark.
		lines = append(lines, "", s.Accent.Render(format.Fit("  coordinator", m.width)), "")
		for _, w := range strings.Split(m.opts.Warning, "; ") {
			lines = append(lines, "  "+s.Help.FullKey.Render("▲ ")+s.Help.FullDesc.Render(w+" (fence config, docs/operations.md)"))
		}
	}
	return format.Block(strings.Join(lines, "\n"), m.width, h)
}
