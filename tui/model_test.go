package tui

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fence-dev/fence/pkg/history"

	tea "github.com/charmbracelet/bubbletea"
	"pgregory.net/rapid"

	"github.com/fence-dev/fence/internal/follow"
	"github.com/fence-dev/fence/pkg/coord"
)

func TestTableShowsEveryColumn(t *testing.T) {
	f := newFake(sampleLocks()...)
	sampleHistory(f)
	h := newHarness(t, f, Options{})
	h.settle()
	s := h.screen()
	checkFrame(t, h.m.View(), 80, 24)

	if !strings.HasPrefix(strings.TrimSpace(s[0]), "NAME▾ STATE HOLDER TOKEN TTL HELD RENEW FAIL STALE") &&
		strings.Join(strings.Fields(s[0]), " ") != "NAME▾ STATE HOLDER TOKEN TTL HELD RENEW FAIL STALE" {
		t.Fatalf("header %q", s[0])
	}
	i := lineOf(s, "deploy/prod")
	if i < 0 {
		t.Fatalf("deploy/prod not on screen:\n%s", h.m.View())
	}
	// 30s TTL with 6s left: under a third, a renewal is late. Narrow
	// columns cut the holder.
	got := fields(s[i])
	want := []string{"deploy/prod", "expiring", "ci-runner…", "57", "█░░░░", "6s", "42s", "0", "4", "1"}
	if !slices.Equal(got, want) {
		t.Errorf("deploy/prod row %q\n got %q\nwant %q", s[i], got, want)
	}
	if got := fields(s[lineOf(s, "reports/daily")]); got[1] != "held" || got[6] != "2h07m" {
		t.Errorf("reports/daily row %q", got)
	}
	if got := fields(s[lineOf(s, "migrations")]); got[1] != "free" || got[2] != "-" {
		t.Errorf("migrations row %q", got)
	}
	// A seven-digit etcd revision is not cut.
	if !strings.Contains(s[lineOf(s, "search/reindex")], " 1200345 ") {
		t.Errorf("search/reindex token cut: %q", s[lineOf(s, "search/reindex")])
	}
	status := s[22]
	for _, part := range []string{"fake /run/fence", "● ok", "read ", "6 locks · 4 held · 1 expiring"} {
		if !strings.Contains(status, part) {
			t.Errorf("status bar %q lacks %q", status, part)
		}
	}

	// Wider, nothing is cut and the status bar has room for the sort.
	h.send(tea.WindowSizeMsg{Width: 160, Height: 30})
	checkFrame(t, h.m.View(), 160, 30)
	s = h.screen()
	if got := fields(s[lineOf(s, "deploy/prod")]); got[2] != "ci-runner-3:88" {
		t.Errorf("holder at 160 columns: %q", got)
	}
	if lineOf(s, "billing/reconcile") != 1 || !strings.Contains(s[28], "sort name") {
		t.Errorf("160 columns:\n%s", h.m.View())
	}
}

func TestEventsUpdateRowsInPlace(t *testing.T) {
	f := newFake(sampleLocks()...)
	h := newHarness(t, f, Options{})
	h.settle()
	before := h.screen()
	line := lineOf(before, "migrations")

	// migrations is taken: its row changes where it is, the others stay.
	f.set(coord.EventAcquired, held("migrations", "dba:1", 10, 15*time.Second, 15*time.Second, 0))
	h.until("migrations held", func() bool { r := h.m.store.Get("migrations"); return r != nil && r.Info.Held })
	after := h.screen()
	if got := lineOf(after, "migrations"); got != line {
		t.Fatalf("migrations moved from line %d to %d", line, got)
	}
	if got := fields(after[line]); got[1] != "held" || got[2] != "dba:1" || got[3] != "10" {
		t.Fatalf("migrations row %q", after[line])
	}
	for i := range before {
		if i != line && i < 22 && before[i] != after[i] {
			t.Errorf("line %d changed:\n%q\n%q", i, before[i], after[i])
		}
	}

	// A new lock appears in its place by name; the selection stays on
	// the lock it was on.
	h.key("down", "down") // deploy/prod
	if h.m.table.Selected() != "deploy/prod" {
		t.Fatalf("selected %q", h.m.table.Selected())
	}
	f.set(coord.EventAcquired, held("aaa/first", "x:1", 1, 15*time.Second, 15*time.Second, 0))
	h.until("aaa/first listed", func() bool { return h.m.store.Get("aaa/first") != nil })
	s := h.screen()
	if lineOf(s, "aaa/first") != 1 || h.m.table.Selected() != "deploy/prod" || !strings.HasPrefix(s[lineOf(s, "deploy/prod")], ">") {
		t.Fatalf("after an insert above the selection:\n%s", h.m.View())
	}

	// Released: free, holder and TTL gone.
	f.set(coord.EventReleased, free("deploy/prod", 57))
	h.until("deploy/prod free", func() bool { return !h.m.store.Get("deploy/prod").Info.Held })
	if got := fields(h.screen()[lineOf(h.screen(), "deploy/prod")]); got[1] != "free" || got[2] != "-" || got[4] != "-" {
		t.Fatalf("released row %q", got)
	}
}

func TestRenewalsCounted(t *testing.T) {
	info := held("job", "w:1", 3, 15*time.Second, 15*time.Second, 0)
	f := newFake(info)
	h := newHarness(t, f, Options{})
	h.settle()
	for range 3 {
		f.set(coord.EventRenewed, info)
	}
	h.until("three renewals", func() bool { return h.m.store.Get("job").Renewals == 3 })
	if got := fields(h.screen()[lineOf(h.screen(), "job")])[7]; got != "3" {
		t.Fatalf("RENEW shows %q", got)
	}
	// A new holder starts from zero.
	f.set(coord.EventAcquired, held("job", "w:2", 4, 15*time.Second, 15*time.Second, 0))
	h.until("the new holder", func() bool { return h.m.store.Get("job").Info.Token == 4 })
	if got := h.m.store.Get("job").Renewals; got != 0 {
		t.Fatalf("renewals %d for a new lease", got)
	}
}

func TestResetListsAgain(t *testing.T) {
	f := newFake(sampleLocks()...)
	h := newHarness(t, f, Options{})
	h.settle()
	lists, _, _ := f.counts()

	// While the watch was lost, a lock appeared and another went away:
	// only a new list can tell.
	f.mu.Lock()
	f.locks["new/lock"] = held("new/lock", "n:1", 1, 15*time.Second, 15*time.Second, 0)
	delete(f.locks, "cache/warm")
	f.mu.Unlock()
	f.send(coord.Event{Type: coord.EventReset})
	h.until("the list after the reset", func() bool { return h.m.store.Get("new/lock") != nil })
	if n, _, _ := f.counts(); n != lists+1 {
		t.Fatalf("%d lists after a reset, want %d", n, lists+1)
	}
	if h.m.store.Get("cache/warm") != nil {
		t.Fatal("a lock gone from the list is still shown")
	}
}

func TestEventsDuringAListAreNotLost(t *testing.T) {
	f := newFake(held("a", "old:1", 1, 15*time.Second, 15*time.Second, 0))
	h := newHarness(t, f, Options{})
	h.settle()
	// A list is on its way (read before the event), the event arrives
	// first: the list must not undo it.
	stale, _ := f.List(h.ctx, "")
	h.send(h.m.startList()) // the real list's result is ignored below
	if !h.m.listing {
		t.Fatal("not listing")
	}
	ev := held("a", "new:2", 2, 15*time.Second, 15*time.Second, 0)
	h.m.Update(eventsMsg{events: []follow.Event{{Event: coord.Event{Type: coord.EventAcquired, Info: ev}}}})
	h.m.Update(listMsg{infos: stale})
	if got := h.m.store.Get("a").Info; got.Token != 2 || got.Holder != "new:2" {
		t.Fatalf("after the list: token %d holder %s, want the event's 2 new:2", got.Token, got.Holder)
	}
}

func TestWatchLostIsRestarted(t *testing.T) {
	f := newFake(sampleLocks()...)
	h := newHarness(t, f, Options{})
	h.settle()
	_, watches, _ := f.counts()
	lists, _, _ := f.counts()
	f.endWatch()
	h.until("the watch marked lost", func() bool { return h.m.watchErr != nil })
	if s := h.screen()[22]; !strings.Contains(s, "▲ watch ended, retrying") {
		t.Fatalf("status bar %q", s)
	}
	h.until("a new watch", func() bool { _, w, _ := f.counts(); return w == watches+1 && h.m.watching })
	h.until("a list after the new watch", func() bool { n, _, _ := f.counts(); return n > lists && !h.m.listing })
	if s := h.screen()[22]; !strings.Contains(s, "● ok") {
		t.Fatalf("status bar after the restart %q", s)
	}
	// Events flow on the new watch.
	f.set(coord.EventAcquired, held("after", "x:1", 1, 15*time.Second, 15*time.Second, 0))
	h.until("an event on the new watch", func() bool { return h.m.store.Get("after") != nil })
}

func TestUnavailable(t *testing.T) {
	f := newFake(sampleLocks()...)
	f.listErr = fmt.Errorf("%w: connection refused", coord.ErrUnavailable)
	f.watchErr = f.listErr
	h := newHarness(t, f, Options{})
	h.until("the failed list", func() bool { return h.m.readErr != nil })
	s := h.screen()
	if !strings.Contains(s[22], "✖ unavailable") {
		t.Fatalf("status bar %q", s[22])
	}
	if !strings.Contains(s[1], "no locks") {
		t.Fatalf("body %q", s[1])
	}
}

// TestNoAnswer: a coordinator that stops answering (a list that never
// returns, as on a frozen etcd) is shown as such on the status line, with
// how long and since when, and the TTLs as unknown instead of counting
// down to expiring; once it answers again, all is as before.
func TestNoAnswer(t *testing.T) {
	var mu sync.Mutex
	now := epoch
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	f := newFake(held("job", "w:1", 3, 15*time.Second, 15*time.Second, 0))
	h := newHarness(t, f, Options{Now: clock, Refresh: 5 * time.Second, Location: time.UTC})
	h.settle()
	gate := make(chan struct{})
	f.mu.Lock()
	f.listGate = gate
	f.mu.Unlock()
	advance(5 * time.Second)
	h.send(tickMsg{}) // the list is due: it does not come back
	h.until("the list on its way", func() bool { return h.m.listing })
	advance(7 * time.Second)
	h.send(tickMsg{})
	s := h.screen()
	if !strings.Contains(s[22], "✖ no answer for 12s (since "+epoch.UTC().Format("15:04:05")+")") {
		t.Fatalf("status bar %q", s[22])
	}
	if got := fields(s[lineOf(s, "job")]); got[1] != "held" || got[4] != "?" {
		t.Fatalf("row while the coordinator does not answer: %q", got)
	}
	close(gate)
	h.until("the list back", func() bool { return !h.m.listing })
	s = h.screen()
	if !strings.Contains(s[22], "● ok") {
		t.Fatalf("status bar once answered %q", s[22])
	}
	if got := fields(s[lineOf(s, "job")]); got[5] != "15s" {
		t.Fatalf("row once answered: %q", got)
	}
}

// TestStallShowsWithinTwoSeconds: a coordinator that stops answering
// between two lists (the next one seconds away, as with the default
// refresh) shows as not answering within two seconds: every tick probes
// it, and a probe unanswered for a second turns the status line. Before,
// the status line said "ok" until a list had been on its way for 2s, up to
// the refresh period plus 2s into the stall.
func TestStallShowsWithinTwoSeconds(t *testing.T) {
	var mu sync.Mutex
	now := epoch
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	f := newFake(held("job", "w:1", 3, 15*time.Second, 15*time.Second, 0))
	h := newHarness(t, f, Options{Now: clock, Refresh: 5 * time.Second, Location: time.UTC})
	h.settle() // the list answered at epoch
	if s := h.screen(); !strings.Contains(s[22], "● ok") {
		t.Fatalf("status bar before the stall %q", s[22])
	}
	// The stall starts now: nothing is answered any more.
	gate := make(chan struct{})
	f.mu.Lock()
	f.listGate = gate
	f.mu.Unlock()
	defer close(gate)
	advance(time.Second)
	h.send(tickMsg{})
	advance(time.Second) // 2s into the stall; the next list is 3s away
	h.send(tickMsg{})
	s := h.screen()
	if !strings.Contains(s[22], "✖ no answer for 2s (since "+epoch.UTC().Format("15:04:05")+")") {
		t.Fatalf("status bar 2s into the stall %q", s[22])
	}
	if h.m.listing {
		t.Fatal("a list was on its way: the test does not show the stall between two lists")
	}
}

// TestWarning: a known problem of the coordinator (an etcd version's
// lease-safety bug) shows on the status line while it answers.
func TestWarning(t *testing.T) {
	h := newHarness(t, newFake(sampleLocks()...), Options{Warning: "lease bug etcd#15247 in etcd 3.4.23"})
	h.settle()
	// 80 columns: its mark beside the health; the totals keep their place.
	if s := h.screen(); !strings.Contains(s[22], "● ok ▲ │") || !strings.Contains(s[22], "6 locks · 4 held") {
		t.Fatalf("status bar %q", s[22])
	}
	// In full on the help screen.
	h.key("?")
	if v := h.m.View(); !strings.Contains(v, "▲ lease bug etcd#15247 in etcd 3.4.23 (fence config") {
		t.Fatalf("the help does not name the warning:\n%s", v)
	}
}

func TestFilter(t *testing.T) {
	f := newFake(sampleLocks()...)
	h := newHarness(t, f, Options{})
	h.settle()
	h.key("/", "c", "i", "-")
	// Matches the holders ci-runner-3 only.
	s := h.screen()
	if lineOf(s, "deploy/prod") != 1 || lineOf(s, "billing/reconcile") >= 0 {
		t.Fatalf("filtered screen:\n%s", h.m.View())
	}
	if !strings.HasPrefix(s[23], "/ci-") {
		t.Fatalf("input line %q", s[23])
	}
	if !strings.Contains(s[22], "1 shown · 6 locks") {
		t.Fatalf("status bar %q", s[22])
	}
	// q is text while typing.
	h.key("q")
	if h.m.filter.Value() != "ci-q" || h.m.ctx.Err() != nil {
		t.Fatalf("q while filtering: value %q", h.m.filter.Value())
	}
	h.key("backspace", "enter")
	if h.m.filtering || h.m.store.Filter() != "ci-" {
		t.Fatalf("enter: filtering %v filter %q", h.m.filtering, h.m.store.Filter())
	}
	// Events keep the filter.
	f.set(coord.EventAcquired, held("ci/cache", "ci-builder:1", 1, 15*time.Second, 15*time.Second, 0))
	h.until("ci/cache", func() bool { return h.m.store.Get("ci/cache") != nil })
	if got := len(h.m.store.Rows()); got != 2 {
		t.Fatalf("%d rows match after an event, want 2", got)
	}
	h.key("esc")
	if got := len(h.m.store.Rows()); got != 7 {
		t.Fatalf("esc left %d rows", got)
	}
	h.key("/", "n", "o", "p", "e")
	if s := h.screen(); !strings.Contains(s[1], `no locks match "nope"`) {
		t.Fatalf("empty filter screen %q", s[1])
	}
	h.key("esc")
}

func TestSortCycles(t *testing.T) {
	f := newFake(sampleLocks()...)
	sampleHistory(f)
	h := newHarness(t, f, Options{})
	h.settle()
	order := func() string {
		var names []string
		for _, l := range h.screen()[1:7] {
			names = append(names, fields(l)[0])
		}
		return strings.Join(names, " ")
	}
	want := []struct{ header, order string }{
		{"STATE▾", "deploy/prod billing/reco… reports/daily search/reind… cache/warm migrations"},
		{"TTL▾", "deploy/prod search/reind… billing/reco… reports/daily cache/warm migrations"},
		{"HELD▾", "reports/daily billing/reco… deploy/prod search/reind… cache/warm migrations"},
		{"TOKEN▾", "search/reind… billing/reco… deploy/prod migrations reports/daily cache/warm"},
		{"FAIL▾", "deploy/prod billing/reco… cache/warm migrations reports/daily search/reind…"},
		{"STALE▾", "deploy/prod billing/reco… cache/warm migrations reports/daily search/reind…"},
		{"NAME▾", "billing/reco… cache/warm deploy/prod migrations reports/daily search/reind…"},
	}
	for _, w := range want {
		h.key("s")
		if !strings.Contains(h.screen()[0], w.header) {
			t.Fatalf("header %q, want %s", h.screen()[0], w.header)
		}
		if got := order(); got != w.order {
			t.Errorf("%s: %s\nwant %s", w.header, got, w.order)
		}
	}
	h.key("S")
	if got := order(); got != "search/reind… reports/daily migrations deploy/prod cache/warm billing/reco…" || !strings.Contains(h.screen()[0], "NAME▴") {
		t.Errorf("reversed: %s / %q", got, h.screen()[0])
	}
}

func TestTTLCountsDownOnTheTick(t *testing.T) {
	var mu sync.Mutex
	now := epoch
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	f := newFake(held("job", "w:1", 3, 15*time.Second, 15*time.Second, 0))
	h := newHarness(t, f, Options{Now: clock, Refresh: time.Hour})
	h.settle()
	row := func() []string { return fields(h.screen()[lineOf(h.screen(), "job")]) }
	if got := row(); got[1] != "held" || got[5] != "15s" {
		t.Fatalf("row %q", got)
	}
	mu.Lock()
	now = now.Add(11 * time.Second)
	mu.Unlock()
	lists, _, inspects := f.counts()
	h.send(tickMsg{})
	if got := row(); got[1] != "expiring" || got[5] != "4s" || got[6] != "11s" {
		t.Fatalf("row after 11s %q", got)
	}
	// The tick only redraws: no list (the refresh period is an hour)...
	if n, _, _ := f.counts(); n != lists {
		t.Fatalf("the tick listed")
	}
	// ...but the expiring row on screen is read again: on etcd, that is
	// how a renewal shows.
	h.until("the expiring row re-read", func() bool { _, _, n := f.counts(); return n > inspects && len(h.m.inspecting) == 0 })
}

func TestDetails(t *testing.T) {
	f := newFake(sampleLocks()...)
	sampleHistory(f)
	h := newHarness(t, f, Options{})
	h.settle()
	h.key("down", "down", "enter")
	h.until("the timeline", func() bool { return !h.m.detailsBusy })
	checkFrame(t, h.m.View(), 80, 24)
	h.send(tea.WindowSizeMsg{Width: 120, Height: 30})
	view := h.m.View()
	checkFrame(t, view, 120, 30)
	s := h.screen()
	if !strings.Contains(s[0], "deploy/prod") || !strings.HasSuffix(strings.TrimSpace(s[0]), "expiring") {
		t.Fatalf("title %q", s[0])
	}
	// Newest first, below the waits and holds.
	first := timelineStart(s)
	if !strings.Contains(s[first], "renewal_failed") || !strings.Contains(s[first], "etcdserver: request timed out") {
		t.Fatalf("first timeline line %q\n%s", s[first], view)
	}
	for _, want := range []string{"lease_lost", "expired", "stale_refused", `key "release/current": token 55 refused, 56 accepted`, "waited 1.2s", "held 1m35s"} {
		if !strings.Contains(view, want) {
			t.Errorf("details lack %q:\n%s", want, view)
		}
	}
	// An event for the lock reads its timeline again.
	f.mu.Lock()
	f.history["deploy/prod"] = append(f.history["deploy/prod"], history.Event{Time: epoch, Lock: "deploy/prod", Kind: history.Revoked, Token: 57, Holder: "ci-runner-3:88"})
	f.mu.Unlock()
	f.set(coord.EventReleased, free("deploy/prod", 57))
	h.until("the revoke in the timeline", func() bool { s := h.screen(); return strings.Contains(s[timelineStart(s)], "revoked") })
	if s := h.screen(); !strings.HasSuffix(strings.TrimSpace(s[0]), "free") {
		t.Fatalf("title after release %q", s[0])
	}
	h.key("esc")
	if h.m.mode != modeTable || lineOf(h.screen(), "deploy/prod") < 0 {
		t.Fatalf("esc did not return to the table:\n%s", h.m.View())
	}
}

func TestNoHistorian(t *testing.T) {
	f := newFake(sampleLocks()...)
	h := newHarness(t, noHistory{f}, Options{})
	h.settle()
	if got := fields(h.screen()[lineOf(h.screen(), "deploy/prod")]); got[8] != "-" || got[9] != "-" {
		t.Fatalf("counters without a history: %q", got)
	}
	h.key("down", "down", "enter")
	h.until("the details", func() bool { return !h.m.detailsBusy })
	if !strings.Contains(h.m.View(), "this coordinator keeps no history") {
		t.Fatalf("details:\n%s", h.m.View())
	}
}

func TestRevokeAsksFirst(t *testing.T) {
	f := newFake(sampleLocks()...)
	h := newHarness(t, f, Options{})
	h.settle()
	h.key("down", "down", "r") // deploy/prod
	if s := h.screen()[23]; !strings.Contains(s, "Revoke the lease on deploy/prod (holder ci-runner-3:88, token 57)? [y/N]") {
		t.Fatalf("question %q", s)
	}
	h.key("n")
	if h.m.asking != nil || len(f.revoked) != 0 || !strings.Contains(h.screen()[23], "revoke cancelled") {
		t.Fatalf("n: revoked %v, line %q", f.revoked, h.screen()[23])
	}
	h.key("r", "y")
	h.until("the revoke", func() bool { return !h.m.changing })
	f.mu.Lock()
	revoked := slices.Clone(f.revoked)
	f.mu.Unlock()
	if !slices.Equal(revoked, []string{"deploy/prod"}) {
		t.Fatalf("revoked %v", revoked)
	}
	if s := h.screen()[23]; !strings.Contains(s, "revoked deploy/prod: token 57 of ci-runner-3:88") {
		t.Fatalf("message %q", s)
	}
	// A free lock: nothing to ask.
	h.key("down", "r")
	if h.m.asking != nil || !strings.Contains(h.screen()[23], "migrations is free: nothing to revoke") {
		t.Fatalf("r on a free lock: %q", h.screen()[23])
	}
}

func TestRevokeRefusesANewHolder(t *testing.T) {
	f := newFake(sampleLocks()...)
	h := newHarness(t, f, Options{})
	h.settle()
	h.key("down", "down", "r")
	// The lock changes hands while the question is on screen (the watch
	// has not told yet): the operator agreed to end token 57, not 58.
	f.mu.Lock()
	f.locks["deploy/prod"] = held("deploy/prod", "ci-runner-4:1", 58, 30*time.Second, 30*time.Second, 0)
	f.mu.Unlock()
	h.key("y")
	h.until("the revoke", func() bool { return !h.m.changing })
	if len(f.revoked) != 0 {
		t.Fatalf("revoked %v", f.revoked)
	}
	if s := h.screen()[23]; !strings.Contains(s, "not revoked: deploy/prod changed hands") {
		t.Fatalf("message %q", s)
	}
}

func TestHelp(t *testing.T) {
	h := newHarness(t, newFake(sampleLocks()...), Options{})
	h.settle()
	h.key("?")
	v := h.m.View()
	for _, want := range []string{"enter details", "/     filter", "r revoke", "FAIL   renewal failures"} {
		if !strings.Contains(v, want) {
			t.Errorf("help lacks %q:\n%s", want, v)
		}
	}
	h.key("?")
	if h.m.mode != modeTable {
		t.Fatal("? did not close the help")
	}
}

func TestQuit(t *testing.T) {
	for _, keys := range [][]string{{"q"}, {"ctrl+c"}, {"/", "x", "ctrl+c"}, {"enter", "q"}, {"?", "q"}} {
		h := newHarness(t, newFake(sampleLocks()...), Options{})
		h.settle()
		var cmd tea.Cmd
		for _, k := range keys {
			cmd = h.send(keyMsg(k))
		}
		if cmd == nil {
			t.Fatalf("%v: no command", keys)
		}
		if _, ok := cmd().(tea.QuitMsg); !ok {
			t.Fatalf("%v: not quitting", keys)
		}
		if h.m.ctx.Err() == nil {
			t.Fatalf("%v: the watch context is still live", keys)
		}
	}
}

func TestNavigationKeepsTheCursorOnScreen(t *testing.T) {
	var locks []coord.LockInfo
	for i := range 100 {
		locks = append(locks, held(fmt.Sprintf("lock-%03d", i), "h:1", uint64(i+1), 15*time.Second, 15*time.Second, 0))
	}
	h := newHarness(t, newFake(locks...), Options{})
	h.settle()
	visible := func() bool {
		s := h.screen()
		i := lineOf(s, h.m.table.Selected())
		return i >= 1 && i <= 21 && strings.HasPrefix(s[i], ">")
	}
	for _, k := range []string{"pgdown", "pgdown", "down", "G", "up", "g", " ", "k", "j"} {
		h.key(k)
		if !visible() {
			t.Fatalf("after %q the selection %q is off screen:\n%s", k, h.m.table.Selected(), h.m.View())
		}
	}
	h.key("G")
	if h.m.table.Selected() != "lock-099" {
		t.Fatalf("G selected %q", h.m.table.Selected())
	}
}

// TestEveryFrameFits draws random states at random sizes: every frame has
// exactly the terminal's height and no line is wider than it.
func TestEveryFrameFits(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		f := newFake()
		m := New(t.Context(), f, Options{Now: fixedClock, Location: time.UTC})
		w := rapid.IntRange(minWidth, 240).Draw(rt, "w")
		hgt := rapid.IntRange(minHeight, 80).Draw(rt, "h")
		m.Update(tea.WindowSizeMsg{Width: w, Height: hgt})
		var infos []coord.LockInfo
		for i := range rapid.IntRange(0, 60).Draw(rt, "n") {
			name := rapid.StringMatching(`[a-z/世界-]{1,80}`).Draw(rt, "name") + fmt.Sprint(i)
			if rapid.Bool().Draw(rt, "held") {
				infos = append(infos, held(name, rapid.StringMatching(`[a-z:0-9]{0,60}`).Draw(rt, "holder"),
					rapid.Uint64().Draw(rt, "token"), 15*time.Second, time.Duration(rapid.Int64Range(-1e10, 2e10).Draw(rt, "left")),
					time.Duration(rapid.Int64Range(0, 1e15).Draw(rt, "ago"))))
			} else {
				infos = append(infos, free(name, rapid.Uint64().Draw(rt, "last")))
			}
			// A limit and a queue of any length, with long names.
			i := &infos[len(infos)-1]
			if rapid.Bool().Draw(rt, "limited") {
				i.Limit = &coord.Limit{Name: name, Prefix: rapid.Bool().Draw(rt, "prefix"), Max: rapid.IntRange(0, coord.MaxLimit).Draw(rt, "max"),
					By: rapid.StringMatching(`[a-z@.]{0,80}`).Draw(rt, "by"), Reason: rapid.StringMatching(`[a-z 世界:]{0,200}`).Draw(rt, "reason"),
					At: epoch.Add(-time.Duration(rapid.Int64Range(0, 1e15).Draw(rt, "at")))}
			}
			for range rapid.IntRange(0, 6).Draw(rt, "waiters") {
				i.Queue = append(i.Queue, coord.Waiter{Holder: rapid.StringMatching(`[a-z:0-9世]{0,90}`).Draw(rt, "waiter"),
					Since:   epoch.Add(-time.Duration(rapid.Int64Range(-1e10, 1e15).Draw(rt, "since"))),
					LeaseID: rapid.StringMatching(`[0-9a-f]{0,24}`).Draw(rt, "lease"), PID: rapid.IntRange(0, 1<<22).Draw(rt, "pid")})
			}
			i.Waiters = len(i.Queue)
		}
		m.backend = rapid.StringMatching(`[a-z /:0-9.]{0,120}`).Draw(rt, "backend")
		m.Update(listMsg{infos: infos})
		var counts []lockCounts
		for _, i := range infos {
			counts = append(counts, lockCounts{name: i.Name, failures: rapid.IntRange(-1, 100000).Draw(rt, "f"), stale: rapid.IntRange(-1, 10).Draw(rt, "s")})
		}
		m.Update(historyMsg{counts: counts})
		if rapid.Bool().Draw(rt, "err") {
			m.Update(listMsg{err: errors.New(strings.Repeat("connection refused ", 20))})
		}
		for _, k := range rapid.SliceOfN(rapid.SampledFrom([]string{"down", "pgdown", "s", "S", "enter", "esc", "?", "/", "a", "r", "f", "t", "y", "n", "G"}), 0, 8).Draw(rt, "keys") {
			m.Update(keyMsg(k))
			if k == "enter" && m.mode == modeDetails {
				// The timeline, with waits and holds.
				var evs []history.Event
				for j := range rapid.IntRange(0, 30).Draw(rt, "events") {
					evs = append(evs, history.Event{Time: epoch.Add(time.Duration(j) * time.Second), Lock: m.details.Name(),
						Kind: rapid.SampledFrom([]history.Kind{history.Acquired, history.Released, history.Frozen, history.Thawed}).Draw(rt, "kind"),
						Wait: time.Duration(rapid.Int64Range(0, 1e13).Draw(rt, "wait")), HeldFor: time.Duration(rapid.Int64Range(0, 1e13).Draw(rt, "held"))})
				}
				m.Update(detailsMsg{inspectMsg: inspectMsg{name: m.details.Name()}, events: evs})
			}
			checkFrame(rt, m.View(), w, hgt)
		}
		checkFrame(rt, m.View(), w, hgt)
	})
}

func TestTinyTerminal(t *testing.T) {
	m := New(t.Context(), newFake(), Options{Now: fixedClock})
	m.Update(tea.WindowSizeMsg{Width: 30, Height: 5})
	if v := m.View(); !strings.HasPrefix(v, "fence top needs 40x8") || strings.Contains(v, "\n") {
		t.Fatalf("tiny terminal view %q", v)
	}
}

// The counters add up what the history kinds of pkg/coord/events.go say.
func TestCountHistory(t *testing.T) {
	evs := []history.Event{
		{Kind: history.Acquired},
		{Kind: history.RenewalFailed, Count: 3}, // three failures written when the coordinator came back
		{Kind: history.RenewalFailed},           // one
		{Kind: history.StaleRefused},
		{Kind: history.StaleRefused},
		{Kind: history.LeaseLost},
		{Kind: history.Revoked},
	}
	if f, s := countHistory(evs); f != 4 || s != 2 {
		t.Fatalf("countHistory = %d, %d; want 4, 2", f, s)
	}
}

// TestSortByFailuresSeesEveryLock: the background sweep reads the history
// of locks never shown, so sorting by renewal failures brings up a lock
// from far off screen.
func TestSortByFailuresSeesEveryLock(t *testing.T) {
	var locks []coord.LockInfo
	for i := range 600 { // more than one sweep batch
		locks = append(locks, held(fmt.Sprintf("lock-%03d", i), "h:1", uint64(i+1), 15*time.Second, 15*time.Second, 0))
	}
	f := newFake(locks...)
	f.history["lock-577"] = []history.Event{{Lock: "lock-577", Kind: history.RenewalFailed, Count: 5}}
	h := newHarness(t, f, Options{})
	h.settle()
	h.key("s", "s", "s", "s", "s") // state, ttl, held for, token, failures
	if !strings.Contains(h.screen()[0], "FAIL▾") {
		t.Fatalf("header %q", h.screen()[0])
	}
	h.until("lock-577 on top", func() bool { return lineOf(h.screen(), "lock-577") == 1 })
	if got := fields(h.screen()[1]); got[8] != "5" {
		t.Fatalf("top row %q", got)
	}
}

// TestDetailsOfAGroup: the details of a `fence shards` member show its
// part of the group's map (the shards it owns, of those held) and the live
// members; those of a shard show its owner. Other locks show no group.
func TestDetailsOfAGroup(t *testing.T) {
	locks := []coord.LockInfo{
		held("billing/members/a", "a", 1, 15*time.Second, 14*time.Second, time.Minute),
		held("billing/members/b", "b", 1, 15*time.Second, 14*time.Second, time.Minute),
		held("billing/shard/0", "a", 3, 15*time.Second, 14*time.Second, time.Minute),
		held("billing/shard/1", "b", 2, 15*time.Second, 14*time.Second, time.Minute),
		held("billing/shard/2", "a", 3, 15*time.Second, 14*time.Second, time.Minute),
		held("billing/shard/3", "a", 5, 15*time.Second, 14*time.Second, time.Minute),
		free("billing/shard/4", 7),
		held("other", "x", 1, 15*time.Second, 14*time.Second, time.Minute),
	}
	f := newFake(locks...)
	h := newHarness(t, f, Options{})
	h.settle()
	h.send(tea.WindowSizeMsg{Width: 140, Height: 30})
	open := func(name string) string {
		t.Helper()
		h.m.mode = modeDetails
		h.m.details.Open(name)
		view := h.m.View()
		checkFrame(t, view, 140, 30)
		return view
	}
	if v := open("billing/members/a"); !strings.Contains(v, "billing · owns 3/4: 0,2-3 · 2 members") {
		t.Errorf("member a's details lack its part of the map:\n%s", v)
	}
	if v := open("billing/shard/1"); !strings.Contains(v, "billing · shard 1 of 4 held · owner b · 2 members") {
		t.Errorf("shard 1's details lack its owner:\n%s", v)
	}
	if v := open("billing/shard/4"); !strings.Contains(v, "owner nobody") {
		t.Errorf("free shard 4's details:\n%s", v)
	}
	if v := open("other"); strings.Contains(v, "group") {
		t.Errorf("a lock of no group shows a group:\n%s", v)
	}
}

// timelineStart is the index of the details' first timeline line: the one
// after the rule.
func timelineStart(screen []string) int {
	for i, l := range screen {
		if strings.Contains(l, "── history, newest first") {
			return i + 1
		}
	}
	return len(screen) - 1
}
