package postgres

import (
	"errors"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/internal/coordkit"
)

func TestDecide(t *testing.T) {
	holders := func(n int) []lease { return make([]lease, n) }
	waiters := func(seqs ...int64) []waiter {
		var ws []waiter
		for _, s := range seqs {
			ws = append(ws, waiter{seq: s})
		}
		return ws
	}
	limit := []coord.Limit{{Name: "l", Max: 1}}
	// step is what try does on decide's answer: grant, wait (in the queue
	// or as a try-lock), join the queue, or the error of other slots or of
	// the last token.
	const (
		tryGrant   = "grant"
		tryWait    = "wait"
		tryJoin    = "join"
		trySlots   = "slots"
		tryCeiling = "ceiling"
	)
	cases := []struct {
		name   string
		st     state
		me     int64
		slots  int
		step   string
		room   int
		queued bool
	}{
		{"idle: grant", state{slots: 1}, 0, 1, tryGrant, 1, false},
		{"idle, other slots: grant", state{slots: 3}, 0, 1, tryGrant, 1, false},
		{"held, other slots", state{slots: 3, holders: holders(1)}, 0, 1, trySlots, 1, false},
		{"queued others, other slots", state{slots: 3, waiters: waiters(5)}, 9, 1, trySlots, 1, false},
		{"only me queued, other slots: grant", state{slots: 3, waiters: waiters(9)}, 9, 1, tryGrant, 1, true},
		{"held, try-lock: wait", state{slots: 1, holders: holders(1)}, 0, 1, tryWait, 1, false},
		{"held, not queued: join", state{slots: 1, holders: holders(1)}, 7, 1, tryJoin, 1, false},
		{"held, queued: wait", state{slots: 1, holders: holders(1), waiters: waiters(7)}, 7, 1, tryWait, 1, true},
		{"free, one ahead: wait", state{slots: 1, waiters: waiters(3, 7)}, 7, 1, tryWait, 1, true},
		{"free, one behind: grant", state{slots: 1, waiters: waiters(7, 9)}, 7, 1, tryGrant, 1, true},
		{"free, a waiter, try-lock: wait", state{slots: 1, waiters: waiters(9)}, 0, 1, tryWait, 1, false},
		{"slots with room: grant", state{slots: 3, holders: holders(2)}, 0, 3, tryGrant, 3, false},
		{"slots full: join", state{slots: 3, holders: holders(3)}, 4, 3, tryJoin, 3, false},
		{"limit below slots: join", state{name: "l", slots: 3, holders: holders(1), limits: limit}, 4, 3, tryJoin, 1, false},
		{"limit 0 (frozen): wait", state{name: "l", slots: 1, limits: []coord.Limit{{Name: "l", Max: 0}}}, 0, 1, tryWait, 0, false},
		{"last token: ceiling", state{slots: 1, last: coord.MaxToken}, 0, 1, tryCeiling, 1, false},
		{"last token, held: join first", state{slots: 1, last: coord.MaxToken, holders: holders(1)}, 2, 1, tryJoin, 1, false},
		{"below the last token: grant", state{slots: 1, last: coord.MaxToken - 1}, 0, 1, tryGrant, 1, false},
	}
	seen := map[string]bool{}
	for _, c := range cases {
		grant, queued, err := decide(&c.st, c.me, c.slots)
		var step string
		var se *coordkit.SlotsError
		switch {
		case errors.As(err, &se) && errors.Is(err, coord.ErrInvalid):
			step = trySlots
		case errors.Is(err, coord.ErrUnavailable) && strings.Contains(err.Error(), "never wrap"):
			step = tryCeiling
		case err != nil:
			step = err.Error()
		case grant:
			step = tryGrant
		case c.me != 0 && !queued: // try's rule
			step = tryJoin
		default:
			step = tryWait
		}
		if step != c.step || c.st.room != c.room || queued != c.queued {
			t.Errorf("%s: decide = %v, %d, %v; want %v, %d, %v", c.name, step, c.st.room, queued, c.step, c.room, c.queued)
		}
		seen[step] = true
	}
	for _, s := range []string{tryGrant, tryWait, tryJoin, trySlots, tryCeiling} {
		if !seen[s] {
			t.Errorf("no case decides step %s", s)
		}
	}
}

func TestParseNote(t *testing.T) {
	const chl, pid = "fence_x", uint32(42)
	n := func(ch string, p uint32, payload string) *pgconn.Notification {
		return &pgconn.Notification{Channel: ch, PID: p, Payload: payload}
	}
	cases := []struct {
		n    *pgconn.Notification
		want note
	}{
		{nil, note{kind: noteNone}},
		{n("fence_l_x", 7, ""), note{kind: noteLimit}},
		{n(chl, pid, "c"), note{kind: noteOwn}},
		{n(chl, pid, "g 3"), note{kind: noteOwn}},
		{n(chl, 7, "j"), note{kind: noteOwn}},
		{n(chl, 7, "g 3"), note{kind: noteGone, seq: 3}},
		{n(chl, 7, "l 12"), note{kind: noteGone, seq: 12}},
		{n(chl, 7, "f"), note{kind: noteFreed}},
		{n(chl, 7, "r 5 99"), note{kind: noteRenewed, id: 5, rvn: 99}},
		{n(chl, 7, "c"), note{kind: noteChange}},
	}
	seen := map[noteKind]bool{}
	for _, c := range cases {
		if got := parseNote(c.n, chl, pid); got != c.want {
			t.Errorf("parseNote(%+v) = %+v; want %+v", c.n, got, c.want)
		}
		seen[c.want.kind] = true
	}
	for k := noteNone; k <= noteChange; k++ {
		if !seen[k] {
			t.Errorf("no case of note kind %d", k)
		}
	}
}

// TestTurnOn: every note kind, with and without waiters ahead, before and
// after the deadline, and what it leaves of the turn.
func TestTurnOn(t *testing.T) {
	t0 := time.Unix(1000, 0)
	later := t0.Add(time.Second)
	stalled := t0.Add(100 * time.Millisecond)
	cases := []struct {
		name      string
		ahead     []int64
		stall     time.Time
		deadline  time.Time
		n         note
		want      action
		wantAhead []int64
		wantStall time.Time
	}{
		{"none, no deadline", nil, time.Time{}, time.Time{}, note{kind: noteNone}, actTry, nil, time.Time{}},
		{"none, before the deadline", []int64{1}, time.Time{}, later, note{kind: noteNone}, actTry, []int64{1}, time.Time{}},
		{"none, at the deadline", []int64{1}, time.Time{}, t0, note{kind: noteNone}, actBusy, []int64{1}, time.Time{}},
		{"limit", []int64{1}, time.Time{}, later, note{kind: noteLimit}, actTry, []int64{1}, time.Time{}},
		{"limit after the deadline", nil, time.Time{}, t0, note{kind: noteLimit}, actTry, nil, time.Time{}},
		{"own", nil, time.Time{}, time.Time{}, note{kind: noteOwn}, actWait, nil, time.Time{}},
		{"own, ahead", []int64{1}, time.Time{}, time.Time{}, note{kind: noteOwn}, actWait, []int64{1}, time.Time{}},
		{"the last ahead granted", []int64{1}, stalled, time.Time{}, note{kind: noteGone, seq: 1}, actTry, nil, time.Time{}},
		{"one of two ahead gone", []int64{1, 2}, stalled, time.Time{}, note{kind: noteGone, seq: 1}, actWait, []int64{2}, time.Time{}},
		{"one behind gone", []int64{1}, stalled, time.Time{}, note{kind: noteGone, seq: 9}, actWait, []int64{1}, stalled},
		{"gone, none ahead", nil, time.Time{}, time.Time{}, note{kind: noteGone, seq: 9}, actTry, nil, time.Time{}},
		{"freed, ahead: stall counted", []int64{1}, time.Time{}, time.Time{}, note{kind: noteFreed}, actWait, []int64{1}, t0.Add(stallPause)},
		{"freed again, ahead: stall kept", []int64{1}, stalled, time.Time{}, note{kind: noteFreed}, actWait, []int64{1}, stalled},
		{"freed, none ahead", nil, time.Time{}, time.Time{}, note{kind: noteFreed}, actTry, nil, time.Time{}},
		{"renewed", nil, time.Time{}, time.Time{}, note{kind: noteRenewed, id: 1, rvn: 2}, actRenewed, nil, time.Time{}},
		{"renewed, ahead", []int64{1}, time.Time{}, later, note{kind: noteRenewed}, actRenewed, []int64{1}, time.Time{}},
		{"change", nil, time.Time{}, time.Time{}, note{kind: noteChange}, actTry, nil, time.Time{}},
		{"change, ahead", []int64{1}, time.Time{}, time.Time{}, note{kind: noteChange}, actTry, []int64{1}, time.Time{}},
	}
	seen := map[noteKind]bool{}
	for _, c := range cases {
		tu := &turn{ahead: set(c.ahead), stall: c.stall, deadline: c.deadline}
		if got := tu.on(c.n, t0); got != c.want {
			t.Errorf("%s: on = %d; want %d", c.name, got, c.want)
		}
		if !maps.Equal(tu.ahead, set(c.wantAhead)) || !tu.stall.Equal(c.wantStall) {
			t.Errorf("%s: left ahead %v stall %v; want %v %v", c.name, tu.ahead, tu.stall, c.wantAhead, c.wantStall)
		}
		seen[c.n.kind] = true
	}
	for k := noteNone; k <= noteChange; k++ {
		if !seen[k] {
			t.Errorf("no case of note kind %d", k)
		}
	}
}

func set(seqs []int64) map[int64]bool {
	m := map[int64]bool{}
	for _, s := range seqs {
		m[s] = true
	}
	return m
}

// TestTurnLooks: when a waiter looks again without a notification.
func TestTurnLooks(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	hs := func(ends ...time.Duration) []lease {
		var l []lease
		for _, e := range ends {
			l = append(l, lease{end: at(e)})
		}
		return l
	}
	cases := []struct {
		name     string
		st       state
		me       int64
		deadline time.Time
		next     time.Time
		ahead    []int64
		until    time.Time
	}{
		{"held: the first end", state{holders: hs(3*time.Second, time.Second), room: 1}, 5, time.Time{}, at(time.Second), nil, at(time.Second)},
		{"held, deadline first", state{holders: hs(3 * time.Second), room: 1}, 5, at(time.Second), at(3 * time.Second), nil, at(time.Second)},
		{"room, far end: a pause", state{holders: hs(3 * time.Second), room: 2, waiters: []waiter{{seq: 2}, {seq: 5}, {seq: 8}}}, 5, time.Time{}, at(stallPause), []int64{2}, at(stallPause)},
		{"room, near end: the end", state{holders: hs(100 * time.Millisecond), room: 2}, 5, time.Time{}, at(100 * time.Millisecond), nil, at(100 * time.Millisecond)},
		{"free, queue ahead: a pause", state{room: 1, waiters: []waiter{{seq: 1}}}, 5, time.Time{}, at(stallPause), []int64{1}, at(stallPause)},
		{"frozen, no deadline: never", state{room: 0}, 5, time.Time{}, time.Time{}, nil, time.Time{}},
		{"frozen, a deadline", state{room: 0}, 5, at(time.Minute), time.Time{}, nil, at(time.Minute)},
	}
	for _, c := range cases {
		tu := newTurn(&c.st, c.me, c.deadline, t0)
		if !tu.next.Equal(c.next) || !maps.Equal(tu.ahead, set(c.ahead)) || !tu.until().Equal(c.until) {
			t.Errorf("%s: next %v ahead %v until %v; want %v %v %v", c.name, tu.next, tu.ahead, tu.until(), c.next, c.ahead, c.until)
		}
	}
	// A stall comes before the next end; a renewal moves next to the new
	// first end, and leaves it with no holder.
	tu := &turn{next: at(time.Second), stall: at(stallPause)}
	if !tu.until().Equal(at(stallPause)) {
		t.Errorf("until with a stall = %v", tu.until())
	}
	tu.renewed(hs(2*time.Second, 4*time.Second))
	if !tu.next.Equal(at(2 * time.Second)) {
		t.Errorf("next after a renewal = %v", tu.next)
	}
	tu.renewed(nil)
	if !tu.next.Equal(at(2 * time.Second)) {
		t.Errorf("next after a renewal with no holder = %v", tu.next)
	}
}
