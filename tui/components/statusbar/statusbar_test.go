package statusbar

import (
	"io"

	"github.com/charmbracelet/lipgloss"
	"strings"
	"testing"

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
