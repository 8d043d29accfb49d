package statusbar

import (
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/charmbracelet/lipgloss"

	"github.com/charmbracelet/x/ansi"

	"github.com/fence-dev/fence/tui/internal/format"
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

// TestDropPart: on a narrow screen the limits go first, then the sort,
// then the latency, then the totals.
func TestDropPart(t *testing.T) {
	for _, c := range []struct {
		parts        []string
		limits, read bool
		want         []string
	}{
		{[]string{"read", "totals", "limits", "sort"}, true, true, []string{"read", "totals", "sort"}},
		{[]string{"totals", "limits", "sort"}, true, false, []string{"totals", "sort"}},
		{[]string{"read", "totals", "sort"}, false, true, []string{"read", "totals"}},
		{[]string{"read", "totals"}, false, true, []string{"totals"}},
		{[]string{"totals", "sort"}, false, false, []string{"totals"}},
		{[]string{"totals"}, false, false, []string{}},
	} {
		if got := dropPart(c.parts, c.limits, c.read); !slices.Equal(got, c.want) {
			t.Errorf("dropPart(%q, limits %v, read %v) = %q, want %q", c.parts, c.limits, c.read, got, c.want)
		}
	}
}

// TestRightParts: the latency when known, the totals (the shown with a
// filter, the waiting when some wait), the limits when any, the sort.
func TestRightParts(t *testing.T) {
	for _, c := range []struct {
		d      Data
		want   []string
		limits bool
	}{
		{Data{Sort: store.ByName}, []string{"0 locks · 0 held · 0 expiring", "sort name"}, false},
		{Data{Read: true, Latency: 1500 * time.Microsecond, Sort: store.ByName, Reverse: true},
			[]string{"read " + format.Latency(1500*time.Microsecond), "0 locks · 0 held · 0 expiring", "sort name (rev)"}, false},
		{Data{Totals: store.Totals{Locks: 3, Held: 2, Expiring: 1, Waiters: 4, Frozen: 1, Limited: 2}, Filter: "w", Shown: 2, Sort: store.ByName},
			[]string{"2 shown · 3 locks · 2 held · 1 expiring · 4 waiting", "1 frozen · 2 limited", "sort name"}, true},
		{Data{Totals: store.Totals{Locks: 1, Limited: 1}, Sort: store.ByName},
			[]string{"1 lock · 0 held · 0 expiring", "1 limited", "sort name"}, true},
	} {
		got, limits := rightParts(c.d)
		if !slices.Equal(got, c.want) || limits != c.limits {
			t.Errorf("rightParts(%+v) = %q, %v; want %q, %v", c.d, got, limits, c.want, c.limits)
		}
	}
}
