package tui

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/charmbracelet/x/ansi"

	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/tui/internal/format"
	"github.com/fence-dev/fence/tui/internal/store"
)

// statusModel is a dashboard width cells wide whose reads are answered
// and whose watch runs (its health is ok), counting totals.
func statusModel(t *testing.T, width int, totals store.Totals) *Model {
	m := New(t.Context(), newFake(), Options{Now: fixedClock})
	m.setSize(width, 24)
	m.watching, m.lastOK, m.totals = true, epoch, totals
	return m
}

// TestTotalsCountLocks: the totals say "1 lock" and "N locks".
func TestTotalsCountLocks(t *testing.T) {
	for _, c := range []struct {
		locks int
		want  string
	}{{0, "0 locks · "}, {1, "1 lock · "}, {2, "2 locks · "}, {10000, "10000 locks · "}} {
		m := statusModel(t, 200, store.Totals{Locks: c.locks, Held: c.locks})
		m.backend = "fake"
		line := ansi.Strip(m.statusView())
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
	for _, c := range []struct {
		width int
		want  string
	}{
		{200, "● ok ▲ lease bug etcd#15247 (residual) in etcd 3.7.3 │"},
		{120, "● ok ▲ lease bug etcd#15247"},
		{100, "● ok ▲"},
	} {
		m := statusModel(t, c.width, store.Totals{Locks: 2, Held: 2, Waiters: 1})
		m.backend, m.opts.Warning = "etcd 127.0.0.1:2379", "lease bug etcd#15247 (residual) in etcd 3.7.3"
		line := ansi.Strip(m.statusView())
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
// then the latency, then the totals (the ranks rightParts gives them).
func TestDropPart(t *testing.T) {
	rank := map[string]int{"limits": 0, "sort": 1, "read": 2, "totals": 3}
	parts := func(names ...string) []part {
		var ps []part
		for _, n := range names {
			ps = append(ps, part{n, rank[n]})
		}
		return ps
	}
	for _, c := range []struct {
		parts, want []part
	}{
		{parts("read", "totals", "limits", "sort"), parts("read", "totals", "sort")},
		{parts("totals", "limits", "sort"), parts("totals", "sort")},
		{parts("read", "totals", "sort"), parts("read", "totals")},
		{parts("read", "totals"), parts("totals")},
		{parts("totals", "sort"), parts("totals")},
		{parts("totals"), parts()},
	} {
		if got := dropPart(c.parts); !slices.Equal(got, c.want) {
			t.Errorf("dropPart(%v) = %v, want %v", c.parts, got, c.want)
		}
	}
}

// TestRightParts: the latency when known, the totals (the shown with a
// filter, the waiting when some wait), the limits when any, the sort; the
// limits are the first to go, then the sort, the latency, the totals.
func TestRightParts(t *testing.T) {
	for i, c := range []struct {
		read    bool
		latency time.Duration
		reverse bool
		totals  store.Totals
		filter  string // the store lists web/a, web/b and db
		want    []part
	}{
		{want: []part{{"0 locks · 0 held · 0 expiring", 3}, {"sort name", 1}}},
		{read: true, latency: 1500 * time.Microsecond, reverse: true,
			want: []part{{"read " + format.Latency(1500*time.Microsecond), 2}, {"0 locks · 0 held · 0 expiring", 3}, {"sort name (rev)", 1}}},
		{totals: store.Totals{Locks: 3, Held: 2, Expiring: 1, Waiters: 4, Frozen: 1, Limited: 2}, filter: "w",
			want: []part{{"2 shown · 3 locks · 2 held · 1 expiring · 4 waiting", 3}, {"1 frozen · 2 limited", 0}, {"sort name", 1}}},
		{totals: store.Totals{Locks: 1, Limited: 1},
			want: []part{{"1 lock · 0 held · 0 expiring", 3}, {"1 limited", 0}, {"sort name", 1}}},
	} {
		m := statusModel(t, 200, c.totals)
		m.store.Replace(epoch, []coord.LockInfo{free("web/a", 0), free("web/b", 0), free("db", 0)})
		m.store.SetFilter(c.filter)
		m.store.SetSort(store.ByName, c.reverse, epoch)
		m.latency = c.latency
		if !c.read {
			m.lastOK = time.Time{}
		}
		if got := m.rightParts(); !slices.Equal(got, c.want) {
			t.Errorf("case %d: rightParts() = %v; want %v", i, got, c.want)
		}
	}
}
