package tui

import (
	"bytes"
	"context"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/x/exp/teatest"
	"github.com/fence-dev/fence/pkg/coord"
)

// TestGolden runs the dashboard in a real Bubble Tea program (teatest) at
// fixed sizes, with colours off (TestMain sets the ASCII profile) and a
// fixed clock, against the fake feed; each case compares the final screen
// with testdata/TestGolden/NAME.golden. Regenerate with -update and review
// the diff.
func TestGolden(t *testing.T) {
	type step struct {
		keys  []string
		until string // text the screen must show before the next step
	}
	cases := []struct {
		name  string
		w, h  int
		noHis bool
		setup func(*fakeCoord)
		steps []step
	}{
		{name: "table_80x24", w: 80, h: 24},
		{name: "table_120x40", w: 120, h: 40},
		{name: "details_80x24", w: 80, h: 24, steps: []step{{keys: []string{"j", "j", "enter"}, until: "lease_lost"}}},
		{name: "details_120x30", w: 120, h: 30, steps: []step{{keys: []string{"j", "j", "enter"}, until: "deadline exceeded"}}},
		{name: "help_80x24", w: 80, h: 24, steps: []step{{keys: []string{"?"}, until: "columns"}}},
		{name: "sorted_by_ttl_80x24", w: 80, h: 24, steps: []step{{keys: []string{"s", "s"}, until: "TTL▾"}}},
		{name: "filter_80x24", w: 80, h: 24, steps: []step{{keys: []string{"/", "r", "e"}, until: "3 shown"}}},
		{name: "revoke_question_80x24", w: 80, h: 24, steps: []step{{keys: []string{"j", "j", "r"}, until: "[y/N]"}}},
		{name: "no_history_80x24", w: 80, h: 24, noHis: true},
		{name: "frozen_prefix_120x24", w: 120, h: 24, setup: limitedLocks},
		{name: "frozen_details_100x30", w: 100, h: 30, setup: limitedLocks, steps: []step{{keys: []string{"j", "j", "enter"}, until: "and 1 more"}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFake(sampleLocks()...)
			sampleHistory(f)
			if c.setup != nil {
				c.setup(f)
			}
			var co coord.Coordinator = f
			marker := []byte("4      1") // deploy/prod's FAIL and STALE: the history is in
			if c.noHis {
				co, marker = noHistory{f}, []byte("-      -")
			}
			m := New(t.Context(), co, Options{Now: fixedClock, Location: time.UTC})
			tm := teatest.NewTestModel(t, m, teatest.WithInitialTermSize(c.w, c.h))
			teatest.WaitFor(t, tm.Output(), func(b []byte) bool {
				return bytes.Contains(b, []byte("fake /run/fence")) && bytes.Contains(b, []byte("● ok")) && bytes.Contains(b, marker)
			}, teatest.WithDuration(20*time.Second), teatest.WithCheckInterval(10*time.Millisecond))
			for _, s := range c.steps {
				for _, k := range s.keys {
					tm.Send(keyMsg(k))
				}
				teatest.WaitFor(t, tm.Output(), func(b []byte) bool { return bytes.Contains(b, []byte(s.until)) },
					teatest.WithDuration(20*time.Second), teatest.WithCheckInterval(10*time.Millisecond))
			}
			tm.Send(tea.KeyMsg{Type: tea.KeyCtrlC})
			final := tm.FinalModel(t, teatest.WithFinalTimeout(20*time.Second)).(*Model)
			view := final.View()
			checkFrame(t, view, c.w, c.h)
			teatest.RequireEqualOutput(t, []byte(view+"\n"))
		})
	}
}

// limitedLocks freezes the prefix deploy/ and limits reports/daily to one
// holder, and queues four waiters on deploy/prod.
func limitedLocks(f *fakeCoord) {
	_ = f.SetLimit(context.Background(), coord.Limit{Name: "deploy/", Prefix: true, By: "alice@ops", Reason: "INC-7: storage degraded", At: epoch.Add(-9 * time.Minute)})
	_ = f.SetLimit(context.Background(), coord.Limit{Name: "reports/daily", Max: 1, By: "bob@ops", At: epoch.Add(-time.Hour)})
	f.mu.Lock()
	defer f.mu.Unlock()
	dp := f.locks["deploy/prod"]
	dp.Queue = []coord.Waiter{
		{Holder: "ci-runner-4:90", Since: epoch.Add(-31 * time.Second), LeaseID: "694d7a0b1c2d3e50"},
		{Holder: "ci-runner-5:17", Since: epoch.Add(-12 * time.Second), LeaseID: "694d7a0b1c2d3e51"},
		{Holder: "ci-runner-1:12", Since: epoch.Add(-4 * time.Second), LeaseID: "694d7a0b1c2d3e52"},
		{Holder: "ci-runner-2:40", Since: epoch.Add(-time.Second), LeaseID: "694d7a0b1c2d3e53"},
	}
	dp.Waiters = len(dp.Queue)
	f.locks["deploy/prod"] = dp
}
