package tui

import (
	"context"
	"fmt"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/fence-dev/fence/internal/follow"
	"github.com/fence-dev/fence/pkg/coord"
)

// benchModel is a dashboard at 120x40 showing n locks, a third of them
// free, with counters loaded, as after the first list.
func benchModel(b *testing.B, n int, sortKey int) *Model {
	b.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	m := New(ctx, newFake(), Options{Now: fixedClock, Location: time.UTC})
	m.Update(tea.WindowSizeMsg{Width: 120, Height: 40})
	m.backend = "local /var/lib/fence"
	infos := make([]coord.LockInfo, n)
	counts := make([]lockCounts, n)
	for i := range infos {
		name := fmt.Sprintf("service-%03d/job-%05d", i%300, i)
		if i%3 == 0 {
			infos[i] = free(name, uint64(i))
		} else {
			infos[i] = held(name, fmt.Sprintf("worker-%d:%d", i%50, 1000+i), uint64(i+1), 15*time.Second,
				time.Duration(i%15)*time.Second, time.Duration(i)*time.Second)
		}
		counts[i] = lockCounts{name: name, failures: i % 7, stale: i % 11}
	}
	m.watching = true
	m.Update(listMsg{infos: infos, latency: 3 * time.Millisecond})
	m.Update(historyMsg{counts: counts})
	for range sortKey {
		m.Update(keyMsg("s"))
	}
	m.Update(keyMsg("pgdown"))
	return m
}

// BenchmarkFrame10k is the time to build one frame (View) with 10,000
// locks: only the 37 rows on screen are drawn.
func BenchmarkFrame10k(b *testing.B) {
	m := benchModel(b, 10_000, 0)
	b.ReportAllocs()
	for b.Loop() {
		_ = m.View()
	}
}

// BenchmarkTickFrame10k is a TTL tick (Update, which counts the totals over
// all 10,000 locks, re-sorting when sorted by state) and the frame after
// it.
func BenchmarkTickFrame10k(b *testing.B) {
	for _, c := range []struct {
		name string
		sort int
	}{{"by-name", 0}, {"by-state", 1}} {
		b.Run(c.name, func(b *testing.B) {
			m := benchModel(b, 10_000, c.sort)
			m.histBusy = true // measure the frame, not the commands
			b.ReportAllocs()
			for b.Loop() {
				m.Update(tickMsg{})
				_ = m.View()
			}
		})
	}
}

// BenchmarkEventFrame10k is one watch event (a renewal, which moves its row
// when sorted by TTL) and the frame after it.
func BenchmarkEventFrame10k(b *testing.B) {
	m := benchModel(b, 10_000, 2) // by TTL
	m.histBusy = true
	rows := m.store.All()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		info := rows[i%len(rows)].Info
		i++
		if !info.Held {
			continue
		}
		info.TTLLeft = time.Duration(i%15) * time.Second
		m.Update(eventsMsg{events: []follow.Event{{Event: coord.Event{Type: coord.EventRenewed, Info: info}}}})
		_ = m.View()
	}
}

func BenchmarkFrame100(b *testing.B) {
	m := benchModel(b, 100, 0)
	b.ReportAllocs()
	for b.Loop() {
		_ = m.View()
	}
}
