package locktable

import (
	"io"
	"testing"
	"time"

	"github.com/charmbracelet/lipgloss"
	"github.com/muesli/termenv"

	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/tui/internal/store"
	"github.com/fence-dev/fence/tui/styles"
)

// TestLayout: the columns a screen width shows and their widths. The
// narrowest screens keep the name only; the lowest prio goes first (RENEW,
// STALE, FAIL, HELD, TTL, HOLDER); wide tokens take width from the others;
// the spare width goes by weight (name 3, holder 2, TTL 1, within TTL's 27).
func TestLayout(t *testing.T) {
	for _, c := range []struct {
		width, tokenW int
		want          [numCols]int
	}{
		{-2, 0, [numCols]int{10, 0, 0, 0, 0, 0, 0, 0, 0}},
		{10, 12, [numCols]int{10, 0, 0, 0, 0, 0, 0, 0, 0}},
		{30, 0, [numCols]int{12, 8, 0, 6, 0, 0, 0, 0, 0}},
		{30, 12, [numCols]int{19, 8, 0, 0, 0, 0, 0, 0, 0}},
		{45, 0, [numCols]int{15, 8, 11, 6, 0, 0, 0, 0, 0}},
		{45, 12, [numCols]int{11, 8, 9, 12, 0, 0, 0, 0, 0}},
		{60, 0, [numCols]int{10, 8, 8, 6, 10, 5, 0, 5, 0}},
		{60, 12, [numCols]int{10, 8, 8, 12, 10, 5, 0, 0, 0}},
		{80, 0, [numCols]int{14, 8, 10, 6, 11, 5, 5, 5, 6}},
		{80, 12, [numCols]int{11, 8, 8, 12, 10, 5, 5, 5, 6}},
		{120, 0, [numCols]int{34, 8, 24, 6, 17, 5, 5, 5, 6}},
		{190, 0, [numCols]int{68, 8, 47, 6, 27, 5, 5, 5, 6}},
		{260, 12, [numCols]int{100, 8, 68, 12, 27, 5, 5, 5, 6}},
	} {
		got := layout(c.width, c.tokenW)
		if got != c.want {
			t.Errorf("layout(%d, %d) = %v, want %v", c.width, c.tokenW, got, c.want)
		}
		if used := needed(fitting(c.width, c.tokenW), c.tokenW); c.width >= 12 && used > c.width {
			t.Errorf("layout(%d, %d): the columns shown need %d cells", c.width, c.tokenW, used)
		}
	}
}

// TestLowestPrio: the column dropped next, never the name.
func TestLowestPrio(t *testing.T) {
	all := [numCols]bool{true, true, true, true, true, true, true, true, true}
	nameOnly := [numCols]bool{colName: true}
	noRenew := all
	noRenew[colRenew] = false
	for _, c := range []struct {
		on   [numCols]bool
		want int
	}{{all, colRenew}, {noRenew, colStale}, {nameOnly, -1}, {[numCols]bool{}, -1}} {
		if got := lowestPrio(c.on); got != c.want {
			t.Errorf("lowestPrio(%v) = %d, want %d", c.on, got, c.want)
		}
	}
}

// TestCounterText: "-" without history, "·" before the counters are read,
// the count else, calling for attention above 0.
func TestCounterText(t *testing.T) {
	for _, c := range []struct {
		n         int
		noHistory bool
		want      string
		alert     bool
	}{
		{-1, false, "·", false},
		{0, false, "0", false},
		{3, false, "3", true},
		{3, true, "-", false},
		{-1, true, "-", false},
	} {
		if got, alert := counterText(c.n, c.noHistory); got != c.want || alert != c.alert {
			t.Errorf("counterText(%d, %v) = %q, %v; want %q, %v", c.n, c.noHistory, got, alert, c.want, c.alert)
		}
	}
}

// TestStateLabel: a limit and a semaphore held show the row's label, the
// others their state (was stateLabel's test; the same cases, now with the
// labels themselves).
func TestStateLabel(t *testing.T) {
	for _, c := range []struct {
		state   store.State
		limited bool
		slots   int
		want    string
	}{
		{store.Held, false, 0, "held"},
		{store.Held, false, 1, "held"},
		{store.Held, false, 3, "2/3 held"},
		{store.Expiring, false, 3, "expiring"},
		{store.Free, false, 3, "free"},
		{store.Free, true, 0, "limit 1"},
		{store.Expiring, true, 0, "limit 1"},
	} {
		r := &store.Row{Info: coord.LockInfo{Slots: c.slots, Holders: make([]coord.HolderInfo, 2)}}
		if c.limited {
			r.Info.Limit = &coord.Limit{Max: 1}
		}
		if got := r.Label(c.state); got != c.want {
			t.Errorf("Label(%v), limited %v, slots %d = %q, want %q", c.state, c.limited, c.slots, got, c.want)
		}
	}
}

// TestCells: each column's cell of a held and of a free lock, unstyled
// (as on the selected row).
func TestCells(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	st := store.New()
	st.Apply(now,
		coord.Event{Info: coord.LockInfo{Name: "held", Held: true, Holder: "web-1", Token: 7, TTL: 30 * time.Second,
			TTLLeft: 20 * time.Second, AcquiredAt: now.Add(-90 * time.Second)}},
		coord.Event{Info: coord.LockInfo{Name: "free", LastToken: 5}})
	st.SetCounts("held", 2, 0, now)
	r := lipgloss.NewRenderer(io.Discard)
	r.SetColorProfile(termenv.Ascii) // the cells' text, without colour
	m := New(styles.New(r))
	for _, c := range []struct {
		lock        string
		unconfirmed bool
		col, width  int
		want        string
	}{
		{"held", false, colName, 6, "held  "},
		{"held", false, colState, 8, "held    "},
		{"held", true, colState, 8, "held    "},
		{"held", false, colHolder, 6, "web-1 "},
		{"held", false, colToken, 4, "   7"},
		{"held", false, colTTL, 16, "██████░░░░   20s"},
		{"held", true, colTTL, 10, "         ?"},
		{"held", false, colHeld, 5, "1m30s"},
		{"held", false, colRenew, 5, "    0"},
		{"held", false, colFail, 5, "    2"},
		{"held", false, colStale, 5, "    0"},
		{"free", false, colState, 8, "free    "},
		{"free", false, colHolder, 6, "-     "},
		{"free", false, colToken, 4, " (5)"},
		{"free", false, colTTL, 10, "         -"},
		{"free", false, colHeld, 5, "    -"},
		{"free", false, colRenew, 5, "    -"},
		{"free", false, colFail, 5, "    ·"},
	} {
		m.Unconfirmed = c.unconfirmed
		x := m.rowOf(st.Get(c.lock), now, true)
		if got := x.draw(c.col, c.width); got != c.want {
			t.Errorf("%s (unconfirmed %v), %s: %q, want %q", c.lock, c.unconfirmed, columns[c.col].title, got, c.want)
		}
	}
}
