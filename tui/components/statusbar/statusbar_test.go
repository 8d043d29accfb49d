package statusbar

import (
	"io"

	"strings"
	"testing"

	"github.com/charmbracelet/lipgloss"

	"github.com/charmbracelet/x/ansi"

	"github.com/fence-dev/fence/tui/internal/store"
	"github.com/fence-dev/fence/tui/styles"
)

// TestTotalsCountLocks: the totals say "1 lock" and "N locks".
func TestTotalsCountLocks(t *testing.T) {
	s := styles.New(lipgloss.NewRenderer(io.Discard))
	for _, c := range []struct {
		locks int
		want  string
	}{{0, "0 locks · "}, {1, "1 lock · "}, {2, "2 locks · "}, {10000, "10000 locks · "}} {
		line := ansi.Strip(View(s, 200, Data{Backend: "fake", Health: OK, Totals: store.Totals{Locks: c.locks, Held: c.locks}}))
		if !strings.Contains(line, c.want) {
			t.Errorf("%d locks: status line %q does not contain %q", c.locks, line, c.want)
		}
		if ansi.StringWidth(line) != 200 {
			t.Errorf("%d locks: status line is %d cells wide, want 200", c.locks, ansi.StringWidth(line))
		}
	}
}

// TestWarningBesideHealth: a known problem of a coordinator that answers
// goes beside "● ok", never instead of it, and never pushes the totals
// or the sort off the line: it gets what the backend can spare, at the
// least its mark.
func TestWarningBesideHealth(t *testing.T) {
	s := styles.New(lipgloss.NewRenderer(io.Discard))
	d := Data{Backend: "etcd 127.0.0.1:2379", Health: OK, Warning: "lease bug etcd#15247 (residual) in etcd 3.7.3",
		Read: true, Totals: store.Totals{Locks: 2, Held: 2, Waiters: 1}}
	for _, c := range []struct {
		width int
		want  string
	}{
		{200, "● ok ▲ lease bug etcd#15247 (residual) in etcd 3.7.3 │"},
		{120, "● ok ▲ lease bug etcd#15247"},
		{100, "● ok ▲"},
	} {
		line := ansi.Strip(View(s, c.width, d))
		if !strings.Contains(line, c.want) {
			t.Errorf("width %d: status line %q does not contain %q", c.width, line, c.want)
		}
		if !strings.Contains(line, "2 locks · 2 held · 0 expiring · 1 waiting") {
			t.Errorf("width %d: the totals are gone: %q", c.width, line)
		}
		if c.width >= 120 && !strings.Contains(line, "sort name") {
			t.Errorf("width %d: the sort is gone: %q", c.width, line)
		}
		if ansi.StringWidth(line) != c.width {
			t.Errorf("width %d: the status line is %d cells wide", c.width, ansi.StringWidth(line))
		}
	}
}
