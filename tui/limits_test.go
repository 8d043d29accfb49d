package tui

import (
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"

	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/history"
)

// stateOf is the STATE cell of lock name on screen ("limit 1" is two
// words).
func stateOf(t *testing.T, h *harness, name string) string {
	t.Helper()
	s := h.screen()
	i := lineOf(s, name)
	if i < 0 {
		t.Fatalf("%s is not on screen:\n%s", name, h.m.View())
	}
	f := fields(s[i])
	if f[1] == "limit" {
		return f[1] + " " + f[2]
	}
	return f[1]
}

// TestLimitsShowInTheTable: a frozen lock reads "frozen" (held or not), a
// limited one "limit N"; the state sort puts them first; a limit set or
// removed while the dashboard runs shows at once, from the watch's
// EventLimit, not at the next list.
func TestLimitsShowInTheTable(t *testing.T) {
	at := epoch.Add(-time.Hour)
	dp := held("deploy/prod", "ci-runner-3:88", 57, 30*time.Second, 25*time.Second, 42*time.Second)
	dp.Limit = &coord.Limit{Name: "deploy/", Prefix: true, By: "alice@ops", Reason: "INC-7", At: at}
	rd := held("reports/daily", "cron:1999", 4, time.Minute, 45*time.Second, time.Hour)
	rd.Limit = &coord.Limit{Name: "reports/daily", Max: 1, By: "bob@ops", At: at}
	f := newFake(dp, rd, free("migrations", 9), held("billing/reconcile", "batch-7:4121", 812, 15*time.Second, 14*time.Second, time.Minute))
	f.limits = []coord.Limit{*dp.Limit, *rd.Limit}
	h := newHarness(t, f, Options{Refresh: time.Hour})
	h.settle()
	for name, want := range map[string]string{"deploy/prod": "frozen", "reports/daily": "limit 1", "migrations": "free", "billing/reconcile": "held"} {
		if got := stateOf(t, h, name); got != want {
			t.Errorf("%s: state %q, want %q", name, got, want)
		}
	}
	// The status line counts them where there is room; on 80 columns the
	// totals stay and the limits' part goes first.
	if st := h.screen()[22]; !strings.Contains(st, "4 locks · 3 held · 0 expiring") {
		t.Errorf("status line at 80 columns %q", st)
	}
	h.send(teaSize(140, 24))
	if st := h.screen()[22]; !strings.Contains(st, "4 locks · 3 held · 0 expiring │ 1 frozen · 1 limited │ sort name") {
		t.Errorf("status line at 140 columns %q", st)
	}
	h.send(teaSize(80, 24))
	h.key("s") // by state
	var order []string
	for _, l := range h.screen()[1:5] {
		order = append(order, fields(l)[0])
	}
	if want := []string{"deploy/prod", "reports/daily", "billing/recon…", "migrations"}; !slices.Equal(order, want) {
		t.Errorf("sorted by state: %v, want %v", order, want)
	}

	lists, _, _ := f.counts()
	if err := f.SetLimit(t.Context(), coord.Limit{Name: "migrations", By: "carol@ops", At: epoch}); err != nil {
		t.Fatal(err)
	}
	h.until("migrations frozen", func() bool { return stateOf(t, h, "migrations") == "frozen" })
	if _, ok, _ := f.ClearLimit(t.Context(), "deploy/", true); !ok {
		t.Fatal("no prefix limit to clear")
	}
	h.until("deploy/prod thawed", func() bool { return stateOf(t, h, "deploy/prod") == "held" })
	if now, _, _ := f.counts(); now != lists {
		t.Errorf("the limits showed after %d more list(s); want them from the watch alone", now-lists)
	}
}

// TestFreezeAndThawAskFirst: f asks before freezing the selected lock and
// t before thawing it (naming the scope of the limit that binds it, a
// prefix's too); n cancels; y sets the limit, with who and why, records
// it in the history, and the row shows it.
func TestFreezeAndThawAskFirst(t *testing.T) {
	f := newFake(sampleLocks()...)
	h := newHarness(t, f, Options{Operator: "ops@console"})
	h.settle()
	h.key("down", "down", "f") // deploy/prod
	if s := h.screen()[23]; !strings.Contains(s, "Freeze deploy/prod (no new holder until thawed; a holder runs on)? [y/N]") {
		t.Fatalf("question %q", s)
	}
	h.key("n")
	if h.m.asking != nil || len(f.limits) != 0 || !strings.Contains(h.screen()[23], "freeze cancelled") {
		t.Fatalf("n: limits %v, line %q", f.limits, h.screen()[23])
	}
	h.key("f", "y")
	h.until("the freeze", func() bool { return !h.m.changing })
	lims, _ := f.Limits(t.Context())
	if len(lims) != 1 || lims[0].Name != "deploy/prod" || lims[0].Prefix || lims[0].Max != 0 ||
		lims[0].By != "ops@console" || lims[0].Reason != "from fence top by ops@console" {
		t.Fatalf("limits after f y: %+v", lims)
	}
	if s := h.screen()[23]; !strings.Contains(s, `froze lock "deploy/prod"`) {
		t.Fatalf("message %q", s)
	}
	h.until("deploy/prod frozen", func() bool { return stateOf(t, h, "deploy/prod") == "frozen" })
	evs, _ := f.History(t.Context(), "deploy/prod", 0)
	if len(evs) != 1 || evs[0].Kind != history.Frozen || evs[0].Holder != "ops@console" {
		t.Fatalf("history after the freeze: %+v", evs)
	}
	h.key("f")
	if h.m.asking != nil || !strings.Contains(h.screen()[23], "deploy/prod is frozen already") {
		t.Fatalf("f on a frozen lock: %q", h.screen()[23])
	}

	h.key("t")
	if s := h.screen()[23]; !strings.Contains(s, "Thaw deploy/prod (frozen by ops@console)? [y/N]") {
		t.Fatalf("thaw question %q", s)
	}
	h.key("y")
	h.until("the thaw", func() bool { return !h.m.changing })
	if lims, _ := f.Limits(t.Context()); len(lims) != 0 {
		t.Fatalf("limits after t y: %+v", lims)
	}
	h.until("deploy/prod thawed", func() bool { return stateOf(t, h, "deploy/prod") == "expiring" })
	if evs, _ := f.History(t.Context(), "deploy/prod", 0); len(evs) != 2 || evs[1].Kind != history.Thawed {
		t.Fatalf("history after the thaw: %+v", evs)
	}

	// A lock held back by a prefix: t says so, and thaws the prefix.
	if err := f.SetLimit(t.Context(), coord.Limit{Name: "reports/", Prefix: true, Max: 1, By: "bob@ops"}); err != nil {
		t.Fatal(err)
	}
	h.until("reports/daily limited", func() bool { return stateOf(t, h, "reports/daily") == "limit 1" })
	h.key("down", "down", "t") // reports/daily
	if s := h.screen()[23]; !strings.Contains(s, `Thaw prefix "reports/" (limit 1 by bob@ops), every lock under it? [y/N]`) {
		t.Fatalf("prefix thaw question %q", s)
	}
	h.key("y")
	h.until("the prefix thaw", func() bool { return !h.m.changing })
	if lims, _ := f.Limits(t.Context()); len(lims) != 0 {
		t.Fatalf("limits after the prefix thaw: %+v", lims)
	}
	if s := h.screen()[23]; !strings.Contains(s, `thawed prefix "reports/"`) {
		t.Fatalf("message %q", s)
	}
	h.key("t")
	if h.m.asking != nil || !strings.Contains(h.screen()[23], "reports/daily has no limit: nothing to thaw") {
		t.Fatalf("t on a lock without a limit: %q", h.screen()[23])
	}
}

// TestDetailsNameTheLimitAndTheQueue: the details say which limit binds
// the lock (scope, who, when, why), who waits in their order (since when,
// lease or pid; the fourth and later counted), and the waits beside the
// holds, from the history.
func TestDetailsNameTheLimitAndTheQueue(t *testing.T) {
	dp := held("deploy/prod", "ci-runner-3:88", 57, 30*time.Second, 25*time.Second, 42*time.Second)
	dp.Limit = &coord.Limit{Name: "deploy/", Prefix: true, By: "alice@ops", Reason: "INC-7: storage degraded", At: epoch.Add(-9 * time.Minute)}
	dp.Queue = []coord.Waiter{
		{Holder: "next:3", Since: epoch.Add(-12 * time.Second), LeaseID: "694d7a0b1c2d3e50"},
		{Holder: "other:4", Since: epoch.Add(-5 * time.Second), PID: 4242},
		{Holder: "w:5", Since: epoch.Add(-2 * time.Second)},
		{Holder: "w:6"},
	}
	dp.Waiters = len(dp.Queue)
	f := newFake(dp)
	sampleHistory(f)
	h := newHarness(t, f, Options{})
	h.settle()
	h.key("enter")
	h.until("the timeline", func() bool { return !h.m.detailsBusy })
	h.send(teaSize(120, 30))
	view := h.m.View()
	checkFrame(t, view, 120, 30)
	s := h.screen()
	if !strings.HasSuffix(strings.TrimSpace(s[0]), "frozen") {
		t.Errorf("title %q", s[0])
	}
	for _, want := range []string{
		`limit     frozen (prefix "deploy/") by alice@ops at 03-14 15:00:26: INC-7: storage degraded`,
		"queue     1. next:3, waiting 12s (since 15:09:14), lease 694d7a0b1c2d3e50",
		"          2. other:4, waiting 5s (since 15:09:21), pid 4242",
		"          3. w:5, waiting 2s (since 15:09:24)",
		"          and 1 more",
		"waits     ▁▁▁",
		"n=3   median 300ms  max 1.2s   total 1.5s",
		"holds     █",
	} {
		if !strings.Contains(view, want) {
			t.Errorf("details lack %q:\n%s", want, view)
		}
	}
	// The timeline starts below them, and scrolls to its oldest event.
	if first := timelineStart(s); !strings.Contains(s[first], "renewal_failed") {
		t.Errorf("first timeline line %q", s[first])
	}
	// On a short screen the header leaves three lines: G scrolls to the
	// oldest event, on the last of them.
	h.send(teaSize(120, 20))
	h.key("G")
	s = h.screen()
	checkFrame(t, h.m.View(), 120, 20)
	if last := s[len(s)-3]; !strings.Contains(last, "waited 1.2s") {
		t.Errorf("the oldest event is not on the timeline's last line (%q):\n%s", last, strings.Join(s, "\n"))
	}
}

// TestFreeLockShowsTheTokenItSortsBy: sorted by TOKEN, every row shows the
// number it is sorted by: a free lock its last token, "(9)", not "-".
func TestFreeLockShowsTheTokenItSortsBy(t *testing.T) {
	h := newHarness(t, newFake(sampleLocks()...), Options{})
	h.settle()
	h.key("s", "s", "s", "s") // state, ttl, held for, token
	if !strings.Contains(h.screen()[0], "TOKEN▾") {
		t.Fatalf("header %q", h.screen()[0])
	}
	last := uint64(1 << 63)
	for _, l := range h.screen()[1:7] {
		f := fields(l)
		tok := f[3] // NAME STATE HOLDER TOKEN
		if tok == "-" {
			last = 0
			continue
		}
		n, err := strconv.ParseUint(strings.Trim(tok, "()"), 10, 64)
		if err != nil || n > last {
			t.Fatalf("%s shows token %q after %d, sorted by token:\n%s", f[0], tok, last, h.m.View())
		}
		if free := f[1] == "free"; free != strings.HasPrefix(tok, "(") {
			t.Errorf("%s (%s) shows its token as %q", f[0], f[1], tok)
		}
		last = n
	}
	if got := fields(h.screen()[lineOf(h.screen(), "migrations")]); got[3] != "(9)" {
		t.Errorf("migrations (free, last token 9): %q", got)
	}
}

func teaSize(w, h int) tea.WindowSizeMsg { return tea.WindowSizeMsg{Width: w, Height: h} }
