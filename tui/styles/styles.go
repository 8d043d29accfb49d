// Package styles holds the one set of lipgloss styles the fence top
// dashboard draws with. Every component takes its look from a *Styles built
// here, so the colour profile (and NO_COLOR) is decided in one place: the
// renderer passed to New.
package styles

import (
	"cmp"

	"github.com/charmbracelet/bubbles/help"
	"github.com/charmbracelet/lipgloss"

	"github.com/fence-dev/fence/tui/internal/store"
)

// Styles is every style of the dashboard. Build it with New.
type Styles struct {
	// Table.
	Header   lipgloss.Style // the column titles
	Selected lipgloss.Style // the whole selected row (cells are unstyled inside it)
	Held     lipgloss.Style // state "held"
	Free     lipgloss.Style // state "free"
	Expiring lipgloss.Style // state "expiring" and its TTL bar
	Limit    lipgloss.Style // state "frozen", "limit N" (an operator limit)
	Dim      lipgloss.Style // unknown values, zero counters
	Alert    lipgloss.Style // non-zero renewal failures and stale refusals
	BarFull  lipgloss.Style // the filled part of a healthy TTL bar
	BarEmpty lipgloss.Style // the empty part of a TTL bar

	// Details view.
	Title lipgloss.Style // the lock name
	Label lipgloss.Style // field names
	Rule  lipgloss.Style // the timeline separator
	Good  lipgloss.Style // acquired, released
	Bad   lipgloss.Style // renewal failed, lease lost, deadline, expired, revoked, stale refused

	// Bottom lines.
	Status   lipgloss.Style // the status bar
	OK       lipgloss.Style // healthy
	Warn     lipgloss.Style // degraded (watch lost, retrying)
	Down     lipgloss.Style // unavailable, in the status bar
	Err      lipgloss.Style // error messages
	Confirm  lipgloss.Style // the revoke confirmation
	Prompt   lipgloss.Style // the filter prompt
	Help     help.Styles    // the key help (bubbles/help)
	Renderer *lipgloss.Renderer
}

// New builds the styles on renderer r (nil: lipgloss's default renderer).
// The renderer decides the colour profile: a renderer on a terminal honours
// NO_COLOR and CLICOLOR; lipgloss.SetColorProfile(termenv.Ascii) or
// r.SetColorProfile(termenv.Ascii) turns colour off.
//
// Nothing here depends on colour to be read: states are words, the selected
// row has a cursor mark, TTL bars are drawn with characters.
func New(r *lipgloss.Renderer) *Styles {
	r = cmp.Or(r, lipgloss.DefaultRenderer())
	c := func(light, dark string) lipgloss.AdaptiveColor {
		return lipgloss.AdaptiveColor{Light: light, Dark: dark}
	}
	var (
		green  = c("#007a3d", "#5fd787")
		yellow = c("#9a6700", "#ffd75f")
		red    = c("#c62828", "#ff6b6b")
		dim    = c("#8a8a8a", "#6c6c6c")
		text   = c("#1a1a1a", "#e4e4e4")
		accent = c("#3451b2", "#87afff")
		barBg  = c("#d0d0d0", "#3a3a3a")
		selBg  = c("#dde4ff", "#303a5f")
		statBg = c("#e8e8e8", "#262626")
	)
	s := &Styles{Renderer: r}
	s.Header = r.NewStyle().Bold(true).Foreground(accent)
	s.Selected = r.NewStyle().Bold(true).Foreground(text).Background(selBg)
	s.Held = r.NewStyle().Foreground(green)
	s.Free = r.NewStyle().Foreground(dim)
	s.Expiring = r.NewStyle().Bold(true).Foreground(yellow)
	s.Limit = r.NewStyle().Bold(true).Foreground(accent)
	s.Dim = r.NewStyle().Foreground(dim)
	s.Alert = r.NewStyle().Bold(true).Foreground(red)
	s.BarFull = r.NewStyle().Foreground(green)
	s.BarEmpty = r.NewStyle().Foreground(barBg)

	s.Title = r.NewStyle().Bold(true).Foreground(accent)
	s.Label = r.NewStyle().Foreground(dim)
	s.Rule = r.NewStyle().Foreground(dim)
	s.Good = r.NewStyle().Foreground(green)
	s.Bad = r.NewStyle().Bold(true).Foreground(red)

	s.Status = r.NewStyle().Foreground(text).Background(statBg)
	s.OK = r.NewStyle().Foreground(green).Background(statBg)
	s.Warn = r.NewStyle().Bold(true).Foreground(yellow).Background(statBg)
	s.Down = r.NewStyle().Bold(true).Foreground(red).Background(statBg)
	s.Err = r.NewStyle().Bold(true).Foreground(red)
	s.Confirm = r.NewStyle().Bold(true).Foreground(yellow)
	s.Prompt = r.NewStyle().Bold(true).Foreground(accent)

	key := r.NewStyle().Foreground(accent)
	desc := r.NewStyle().Foreground(dim)
	s.Help = help.Styles{
		Ellipsis:       desc,
		ShortKey:       key,
		ShortDesc:      desc,
		ShortSeparator: desc,
		FullKey:        key,
		FullDesc:       desc,
		FullSeparator:  desc,
	}
	return s
}

// State is the style of a lock's state (the STATE column, the details'
// title): the limit's when an operator limit binds the lock, else held's,
// expiring's or free's.
func (s *Styles) State(limited bool, st store.State) lipgloss.Style {
	switch {
	case limited:
		return s.Limit
	case st == store.Held:
		return s.Held
	case st == store.Expiring:
		return s.Expiring
	}
	return s.Free
}
