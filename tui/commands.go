package tui

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fence-dev/fence/pkg/history"

	tea "github.com/charmbracelet/bubbletea"

	"github.com/fence-dev/fence/pkg/coord"
)

// Every read of the coordinator happens in a tea.Cmd below, on its own
// goroutine; Update only receives the results as messages.

// maxBatch bounds the events one message carries, so that a burst is drawn
// once instead of once per event, and a flood cannot starve the keys.
const maxBatch = 4096

type (
	describeMsg struct{ text string }

	watchStartedMsg struct {
		gen    int
		ch     <-chan coord.Event
		cancel context.CancelFunc
		err    error
	}

	eventsMsg struct {
		gen    int
		events []coord.Event
		closed bool // the watch channel is closed
	}

	restartWatchMsg struct{ gen int }

	listMsg struct {
		infos   []coord.LockInfo
		err     error
		latency time.Duration
	}

	inspectMsg struct {
		name    string
		info    coord.LockInfo
		err     error
		latency time.Duration
	}

	// historyMsg carries the counters of a batch of locks.
	historyMsg struct {
		counts  []lockCounts
		elapsed time.Duration
	}

	detailsMsg struct {
		name    string
		info    coord.LockInfo
		infoErr error
		events  []history.Event
		histErr error
		latency time.Duration
	}

	revokeMsg struct {
		target  revokeTarget
		ended   coord.LockInfo
		current coord.LockInfo // set when the lock changed hands before the revoke
		err     error
	}

	tickMsg struct{}
)

type lockCounts struct {
	name            string
	failures, stale int
	err             error
}

type revokeTarget struct {
	name   string
	holder string
	token  uint64
}

// errChanged says the lock changed hands between the confirmation and the
// revoke.
var errChanged = errors.New("the lock changed hands")

func (m *Model) describeCmd() tea.Cmd {
	c := m.c
	return func() tea.Msg { return describeMsg{text: c.Describe()} }
}

// watchCmd starts a watch of the prefix under its own context.
func (m *Model) watchCmd(gen int) tea.Cmd {
	c, parent, prefix := m.c, m.ctx, m.opts.Prefix
	return func() tea.Msg {
		ctx, cancel := context.WithCancel(parent)
		ch, err := c.Watch(ctx, prefix)
		if err != nil {
			cancel()
			return watchStartedMsg{gen: gen, err: err}
		}
		return watchStartedMsg{gen: gen, ch: ch, cancel: cancel}
	}
}

// nextEventsCmd waits for the next events of a watch: one, then whatever
// else is already queued, up to maxBatch.
func (m *Model) nextEventsCmd(gen int, ch <-chan coord.Event) tea.Cmd {
	ctx := m.ctx
	return func() tea.Msg {
		var evs []coord.Event
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-ch:
			if !ok {
				return eventsMsg{gen: gen, closed: true}
			}
			evs = append(evs, ev)
		}
		for len(evs) < maxBatch {
			select {
			case ev, ok := <-ch:
				if !ok {
					return eventsMsg{gen: gen, events: evs, closed: true}
				}
				evs = append(evs, ev)
			default:
				return eventsMsg{gen: gen, events: evs}
			}
		}
		return eventsMsg{gen: gen, events: evs}
	}
}

// after sends msg once d has passed, or nothing when the dashboard ends
// first (tea.Tick would keep its goroutine until the timer fires).
func (m *Model) after(d time.Duration, msg tea.Msg) tea.Cmd {
	ctx := m.ctx
	return func() tea.Msg {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			return msg
		}
	}
}

func (m *Model) listCmd() tea.Cmd {
	c, ctx, prefix, now := m.c, m.ctx, m.opts.Prefix, m.opts.Now
	return func() tea.Msg {
		start := now()
		infos, err := c.List(ctx, prefix)
		return listMsg{infos: infos, err: err, latency: now().Sub(start)}
	}
}

func (m *Model) inspectCmd(name string) tea.Cmd {
	c, ctx, now := m.c, m.ctx, m.opts.Now
	return func() tea.Msg {
		start := now()
		info, err := c.Inspect(ctx, name)
		return inspectMsg{name: name, info: info, err: err, latency: now().Sub(start)}
	}
}

// historyCmd reads the history of a batch of locks and counts renewal
// failures and stale refusals, after waiting delay (so that a sweep of many
// locks leaves the coordinator time for others).
func (m *Model) historyCmd(names []string, delay time.Duration) tea.Cmd {
	h, ctx, now := m.hist, m.ctx, m.opts.Now
	return func() tea.Msg {
		if delay > 0 {
			t := time.NewTimer(delay)
			select {
			case <-ctx.Done():
				t.Stop()
				return nil
			case <-t.C:
			}
		}
		start := now()
		out := make([]lockCounts, 0, len(names))
		for _, name := range names {
			if ctx.Err() != nil {
				return nil
			}
			evs, err := h.History(ctx, name, 0)
			f, s := countHistory(evs)
			out = append(out, lockCounts{name: name, failures: f, stale: s, err: err})
		}
		return historyMsg{counts: out, elapsed: now().Sub(start)}
	}
}

// countHistory adds up the renewal failures (an event may stand for Count
// failures seen while the coordinator was unreachable) and the stale tokens
// refused.
func countHistory(evs []history.Event) (failures, stale int) {
	for _, ev := range evs {
		switch ev.Kind {
		case history.RenewalFailed:
			failures += max(ev.Count, 1)
		case history.StaleRefused:
			stale++
		}
	}
	return failures, stale
}

// detailsCmd reads one lock and its timeline.
func (m *Model) detailsCmd(name string) tea.Cmd {
	c, h, ctx, now := m.c, m.hist, m.ctx, m.opts.Now
	return func() tea.Msg {
		start := now()
		info, err := c.Inspect(ctx, name)
		msg := detailsMsg{name: name, info: info, infoErr: err, latency: now().Sub(start)}
		if h != nil {
			msg.events, msg.histErr = h.History(ctx, name, 0)
		}
		return msg
	}
}

// revokeCmd revokes the lease the operator confirmed, and only that one: it
// reads the lock first and refuses when another lease holds it by now. (A
// holder change between that read and the revoke is not caught: Revoke ends
// whatever lease holds the lock.)
func (m *Model) revokeCmd(t revokeTarget) tea.Cmd {
	c, ctx := m.c, m.ctx
	return func() tea.Msg {
		cur, err := c.Inspect(ctx, t.name)
		if err != nil {
			return revokeMsg{target: t, err: err}
		}
		if !cur.Held {
			return revokeMsg{target: t, err: coord.ErrNotHeld}
		}
		if cur.Token != t.token {
			return revokeMsg{target: t, current: cur, err: fmt.Errorf("%w: now token %d of %s", errChanged, cur.Token, cur.Holder)}
		}
		ended, err := c.Revoke(ctx, t.name)
		return revokeMsg{target: t, ended: ended, err: err}
	}
}
