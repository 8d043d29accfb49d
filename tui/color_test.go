package tui

import (
	"io"
	"strings"
	"testing"

	"github.com/charmbracelet/lipgloss"
	"github.com/muesli/termenv"
)

// TestNoColor: on a colour terminal the dashboard is coloured; NO_COLOR in
// the environment, or Options.NoColor, turns every escape sequence off,
// and the screen says the same in words.
func TestNoColor(t *testing.T) {
	t.Setenv("TERM", "xterm-256color")
	t.Setenv("COLORTERM", "truecolor")
	t.Setenv("CLICOLOR", "")
	t.Setenv("CLICOLOR_FORCE", "")
	cases := []struct {
		name    string
		noColor string // NO_COLOR
		opt     bool   // Options.NoColor
		colored bool
	}{
		{"colour terminal", "", false, true},
		{"NO_COLOR", "1", false, false},
		{"Options.NoColor", "", true, false},
	}
	var plain []string
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv("NO_COLOR", c.noColor)
			// A renderer that takes io.Discard for a terminal, as Run's
			// does with the real one: it reads TERM and NO_COLOR.
			r := lipgloss.NewRenderer(io.Discard, termenv.WithTTY(true))
			f := newFake(sampleLocks()...)
			sampleHistory(f)
			h := newHarness(t, f, Options{Renderer: r, NoColor: c.opt})
			h.settle()
			v := h.m.View()
			if got := strings.Contains(v, "\x1b["); got != c.colored {
				t.Fatalf("escape sequences: %v, want %v:\n%q", got, c.colored, v)
			}
			if !c.colored {
				plain = append(plain, v)
			}
		})
	}
	if len(plain) == 2 && plain[0] != plain[1] {
		t.Fatal("NO_COLOR and Options.NoColor draw different screens")
	}
}
