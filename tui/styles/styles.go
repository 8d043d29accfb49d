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
	Accent   lipgloss.Style // the column titles, the lock's name, a limit ("frozen", "limit N"), the filter prompt
	Good     lipgloss.Style // state "held", a healthy TTL bar, acquired, released
	Caution  lipgloss.Style // state "expiring" and its TTL bar, the revoke, freeze and thaw questions
	Bad      lipgloss.Style // renewal failures and stale refusals, bad events, error messages
	Dim      lipgloss.Style // state "free", unknown values, zero counters, field names, the timeline's rule
	Selected lipgloss.Style // the whole selected row (cells are unstyled inside it)
	BarEmpty lipgloss.Style // the empty part of a TTL bar

	// The status bar.
	Status lipgloss.Style
	OK     lipgloss.Style // healthy
	Warn   lipgloss.Style // degraded (watch lost, retrying)
	Down   lipgloss.Style // unavailable
	Help   help.Styles    // the key help (bubbles/help)
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
	s := &Styles{}
	s.Accent = r.NewStyle().Bold(true).Foreground(accent)
	s.Good = r.NewStyle().Foreground(green)
	s.Caution = r.NewStyle().Bold(true).Foreground(yellow)
	s.Bad = r.NewStyle().Bold(true).Foreground(red)
	s.Dim = r.NewStyle().Foreground(dim)
	s.Selected = r.NewStyle().Bold(true).Foreground(text).Background(selBg)
	s.BarEmpty = r.NewStyle().Foreground(barBg)

	s.Status = r.NewStyle().Foreground(text).Background(statBg)
	s.OK = r.NewStyle().Foreground(green).Background(statBg)
	s.Warn = r.NewStyle().Bold(true).Foreground(yellow).Background(statBg)
	s.Down = r.NewStyle().Bold(true).Foreground(red).Background(statBg)

	key := r.NewStyle().Foreground(accent)
	desc := s.Dim
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
		return s.Accent
	case st == store.Held:
		return s.Good
	case st == store.Expiring:
		return s.Caution
	}
	return s.Dim
}
