package tui

import (
	"errors"
	"fmt"
	"time"

	tea "github.com/charmbracelet/bubbletea"

	"github.com/fence-dev/fence/internal/follow"
	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/history"
)

// maxBatch bounds the events one message carries, so that a burst is drawn
// once instead of once per event, and a flood cannot starve the keys.
const maxBatch = 4096

type (
	// eventsMsg carries the watch's events (package follow's, with its
	// news of the watch itself).
	eventsMsg struct{ events []follow.Event }

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

	// detailsMsg is an inspect of the lock in the details, and its
	// history.
	detailsMsg struct {
		inspectMsg
		events  []history.Event
		histErr error
	}

	// doneMsg ends a revoke, a freeze or a thaw: what the bottom line
	// says, and the lock as read afterwards (read: a freeze or a thaw).
	doneMsg struct {
		flash string
		isErr bool
		info  coord.LockInfo
		read  bool
	}

	tickMsg struct{}
)

type lockCounts struct {
	name            string
	failures, stale int
	err             error
}

// nextEventsCmd waits for the next events of the watch: one, then
// whatever else is already queued, up to maxBatch. The channel closes when
// the dashboard ends.
func (m *Model) nextEventsCmd() tea.Cmd {
	ch := m.events
	return func() tea.Msg {
		ev, ok := <-ch
		if !ok {
			return nil
		}
		evs := []follow.Event{ev}
		for len(evs) < maxBatch && len(ch) > 0 {
			evs = append(evs, <-ch)
		}
		return eventsMsg{events: evs}
	}
}

// after sends msg once d has passed, or nothing when the dashboard ends
// first (tea.Tick would keep its goroutine until the timer fires).
func (m *Model) after(d time.Duration, msg tea.Msg) tea.Cmd {
	ctx := m.ctx
	return func() tea.Msg {
		if !follow.Sleep(ctx, d) {
			return nil
		}
		return msg
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

// probeName is the lock the health probe inspects: any name does, a free
// lock's answer is an answer too.
const probeName = "fence-top-probe"

// inspectCmd reads one lock; every tick, probeName (see probeStall).
func (m *Model) inspectCmd(name string) tea.Cmd {
	c, ctx, now := m.c, m.ctx, m.opts.Now
	return func() tea.Msg {
		start := now()
		info, err := c.Inspect(ctx, name)
		if ctx.Err() != nil {
			return nil
		}
		return inspectMsg{name: name, info: info, err: err, latency: now().Sub(start)}
	}
}

// historyCmd reads the history of a batch of locks and counts renewal
// failures and stale refusals, after waiting delay (so that a sweep of many
// locks leaves the coordinator time for others).
func (m *Model) historyCmd(names []string, delay time.Duration) tea.Cmd {
	h, ctx, now := m.hist, m.ctx, m.opts.Now
	return func() tea.Msg {
		if delay > 0 && !follow.Sleep(ctx, delay) {
			return nil
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
		msg := detailsMsg{inspectMsg: inspectMsg{name: name, info: info, err: err, latency: now().Sub(start)}}
		if h != nil {
			msg.events, msg.histErr = h.History(ctx, name, 0)
		}
		return msg
	}
}

// revokeCmd revokes the lease the operator confirmed (token's on lock
// name), and only that one: it reads the lock first and refuses when
// another lease holds it by now. (A holder change between that read and the
// revoke is not caught: Revoke ends whatever lease holds the lock.)
func (m *Model) revokeCmd(name string, token uint64) tea.Cmd {
	c, ctx := m.c, m.ctx
	return func() tea.Msg {
		cur, err := c.Inspect(ctx, name)
		var ended coord.LockInfo
		switch {
		case err != nil:
		case !cur.Held:
			err = coord.ErrNotHeld
		case cur.Token != token:
			return doneMsg{isErr: true,
				flash: fmt.Sprintf("not revoked: %s changed hands (now token %d of %s)", name, cur.Token, cur.Holder)}
		default:
			ended, err = c.Revoke(ctx, name)
		}
		switch {
		case errors.Is(err, coord.ErrNotHeld):
			return doneMsg{flash: fmt.Sprintf("not revoked: %s is free already", name)}
		case err != nil:
			return doneMsg{isErr: true, flash: fmt.Sprintf("revoke %s: %v", name, err)}
		}
		return doneMsg{flash: fmt.Sprintf("revoked %s: token %d of %s", name, ended.Token, ended.Holder)}
	}
}

// limitCmd makes the freeze (of lock name) or the thaw (of scope, the limit
// that binds lock name) the operator confirmed, records it in the history
// of the locks it covers (best effort, as fence freeze and fence thaw do),
// and reads the lock again.
func (m *Model) limitCmd(name string, freeze bool, scope coord.Limit) tea.Cmd {
	c, h, ctx, by := m.c, m.hist, m.ctx, m.opts.Operator
	verb, done := "thaw", "thawed"
	if freeze {
		verb, done = "freeze", "froze"
	}
	return func() tea.Msg {
		fail := func(err error) tea.Msg {
			return doneMsg{isErr: true, flash: fmt.Sprintf("%s %s: %v", verb, scope.Scope(), err)}
		}
		now := time.Now()
		ev := history.Event{Kind: history.Frozen, Holder: by, Reason: "from fence top by " + by, Time: now}
		removed := true
		if freeze {
			if err := c.SetLimit(ctx, coord.Limit{Name: name, By: by, Reason: ev.Reason, At: now}); err != nil {
				return fail(err)
			}
		} else {
			old, ok, err := c.ClearLimit(ctx, scope.Name, scope.Prefix)
			if err != nil {
				return fail(err)
			}
			removed = ok
			ev.Kind, ev.Reason = history.Thawed, old.Describe()
			if old.Prefix {
				ev.Reason = old.Scope() + ": " + ev.Reason
			}
		}
		if h != nil && removed {
			names := []string{name}
			if scope.Prefix {
				if infos, err := c.List(ctx, scope.Name); err == nil {
					names = names[:0]
					for _, i := range infos {
						names = append(names, i.Name)
					}
				}
			}
			for _, n := range names {
				ev.Lock = n
				_ = h.Record(ctx, ev)
			}
		}
		info, err := c.Inspect(ctx, name)
		msg := doneMsg{info: info, read: err == nil, flash: fmt.Sprintf("%s %s", done, scope.Scope())}
		switch {
		case !removed:
			msg.flash = fmt.Sprintf("not thawed: %s had no limit by now", scope.Scope())
		case err == nil && info.Limit != nil && !freeze:
			msg.flash = fmt.Sprintf("thawed %s; %s is still %s", scope.Scope(), name, info.Limit.Describe())
		}
		return msg
	}
}
