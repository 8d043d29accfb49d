package tui

import "github.com/charmbracelet/bubbles/key"

// keyMap is every key binding of the dashboard. It implements
// bubbles/help.KeyMap, so the "?" screen and the short help line are
// generated from the same bindings that Update matches.
type keyMap struct {
	Up       key.Binding
	Down     key.Binding
	PageUp   key.Binding
	PageDown key.Binding
	Top      key.Binding
	Bottom   key.Binding

	Details key.Binding // open the selected lock
	Back    key.Binding // leave the details, the help, the filter
	Filter  key.Binding // start typing a filter
	Sort    key.Binding // next sort column
	Reverse key.Binding // reverse the sort
	Revoke  key.Binding // revoke the selected lease (asks first)
	Freeze  key.Binding // freeze the selected lock (asks first)
	Thaw    key.Binding // remove the limit that binds the selected lock (asks first)
	Help    key.Binding
	Quit    key.Binding
	// Interrupt quits from anywhere, also while typing a filter.
	Interrupt key.Binding

	Yes key.Binding // confirm a revoke, a freeze or a thaw (any other key cancels)

	Apply key.Binding // keep the typed filter and leave the input
}

// defaultKeys is the standard bindings.
func defaultKeys() keyMap {
	return keyMap{
		Up:       key.NewBinding(key.WithKeys("up", "k"), key.WithHelp("↑/k", "up")),
		Down:     key.NewBinding(key.WithKeys("down", "j"), key.WithHelp("↓/j", "down")),
		PageUp:   key.NewBinding(key.WithKeys("pgup", "ctrl+b"), key.WithHelp("pgup", "page up")),
		PageDown: key.NewBinding(key.WithKeys("pgdown", "ctrl+f", " "), key.WithHelp("pgdn", "page down")),
		Top:      key.NewBinding(key.WithKeys("home", "g"), key.WithHelp("g/home", "first")),
		Bottom:   key.NewBinding(key.WithKeys("end", "G"), key.WithHelp("G/end", "last")),

		Details: key.NewBinding(key.WithKeys("enter"), key.WithHelp("enter", "details")),
		Back:    key.NewBinding(key.WithKeys("esc", "backspace"), key.WithHelp("esc", "back")),
		Filter:  key.NewBinding(key.WithKeys("/"), key.WithHelp("/", "filter")),
		Sort:    key.NewBinding(key.WithKeys("s"), key.WithHelp("s", "sort")),
		Reverse: key.NewBinding(key.WithKeys("S"), key.WithHelp("S", "reverse")),
		Revoke:  key.NewBinding(key.WithKeys("r"), key.WithHelp("r", "revoke")),
		Freeze:  key.NewBinding(key.WithKeys("f"), key.WithHelp("f", "freeze")),
		Thaw:    key.NewBinding(key.WithKeys("t"), key.WithHelp("t", "thaw")),
		Help:    key.NewBinding(key.WithKeys("?"), key.WithHelp("?", "keys")),
		Quit:    key.NewBinding(key.WithKeys("q", "ctrl+c"), key.WithHelp("q", "quit")),

		Interrupt: key.NewBinding(key.WithKeys("ctrl+c"), key.WithHelp("ctrl+c", "quit")),

		Yes: key.NewBinding(key.WithKeys("y", "Y"), key.WithHelp("y", "yes")),

		Apply: key.NewBinding(key.WithKeys("enter"), key.WithHelp("enter", "apply")),
	}
}

// ShortHelp is the one-line help of the table.
func (k keyMap) ShortHelp() []key.Binding {
	return []key.Binding{k.Details, k.Filter, k.Sort, k.Revoke, k.Help, k.Quit}
}

// FullHelp is the "?" screen, in columns.
func (k keyMap) FullHelp() [][]key.Binding {
	return [][]key.Binding{
		{k.Up, k.Down, k.PageUp, k.PageDown, k.Top, k.Bottom},
		{k.Details, k.Back, k.Filter, k.Sort, k.Reverse},
		{k.Revoke, k.Freeze, k.Thaw, k.Help, k.Quit},
	}
}
