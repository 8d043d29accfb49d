package postgres

import (
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// A queued waiter, between two tries (each a query), waits for
// notifications on its own connection. This file holds its rules as pure
// functions: what a notification says (parseNote), and what the waiter
// does then (turn.on).

// noteKind is what a notification, or its absence, says to a waiter.
type noteKind uint8

const (
	// noteNone: none came before the waiter's next look (turn.until).
	noteNone noteKind = iota
	// noteLimit: a limit changed (the limits' channel).
	noteLimit
	// noteOwn: the waiter's own change, or a waiter joined ("j"): nothing
	// for it.
	noteOwn
	// noteGone: waiter seq was granted ("g SEQ") or left ("l SEQ").
	noteGone
	// noteFreed: a lease ended ("f").
	noteFreed
	// noteRenewed: lease id was renewed with record version rvn ("r ID RVN").
	noteRenewed
	// noteChange: any other change of the lock ("c").
	noteChange
)

// note is a notification as a waiter reads it.
type note struct {
	kind         noteKind
	seq, id, rvn int64
}

// parseNote reads n, a notification on the connection of PID pid that
// listens on lock channel chl (nil: none came).
func parseNote(n *pgconn.Notification, chl string, pid uint32) note {
	switch {
	case n == nil:
		return note{kind: noteNone}
	case n.Channel != chl:
		return note{kind: noteLimit}
	case n.PID == pid || n.Payload == "j":
		return note{kind: noteOwn}
	case n.Payload == "f":
		return note{kind: noteFreed}
	case strings.HasPrefix(n.Payload, "g "), strings.HasPrefix(n.Payload, "l "):
		nt := note{kind: noteGone}
		fmt.Sscanf(n.Payload[2:], "%d", &nt.seq)
		return nt
	case strings.HasPrefix(n.Payload, "r "):
		nt := note{kind: noteRenewed}
		fmt.Sscanf(n.Payload, "r %d %d", &nt.id, &nt.rvn)
		return nt
	}
	return note{kind: noteChange}
}

// action is what a waiter does on a note.
type action uint8

const (
	// actWait: nothing to do; wait on.
	actWait action = iota
	// actTry: try again (one query).
	actTry
	// actBusy: the wait's deadline passed: leave the queue, busy.
	actBusy
	// actRenewed: a holder renewed: its lease's unrenewed count starts again
	// (observe), then turn.renewed; no query.
	actRenewed
)

// turn is what a queued waiter knows between two tries.
type turn struct {
	// next is when to look at the lock again: the end of the first holder's
	// lease as this client counts it, or a short pause when the lock has
	// room that a waiter ahead has not taken yet (zero: none).
	next time.Time
	// ahead are the waiters ahead of this one. While one is, a release is
	// theirs to take, and their grants and leavings are counted from their
	// notifications, without a query...
	ahead map[int64]bool
	// stall, when not zero, is when a lease freed while waiters were ahead
	// has been left untaken for stallPause: then the waiter looks.
	stall time.Time
	// deadline ends the wait (zero: none).
	deadline time.Time
}

// newTurn is the turn of waiter me after a try that read st at now.
func newTurn(st *state, me int64, deadline, now time.Time) *turn {
	t := &turn{ahead: map[int64]bool{}, deadline: deadline, next: firstEnd(st.holders)}
	if len(st.holders) < st.room && (t.next.IsZero() || t.next.Sub(now) > stallPause) {
		t.next = now.Add(stallPause) // room, but a waiter ahead has not taken it yet
	}
	for _, w := range st.waiters {
		if w.seq < me {
			t.ahead[w.seq] = true
		}
	}
	return t
}

// firstEnd is the earliest end of hs, the holders' leases (zero: none).
func firstEnd(hs []lease) time.Time {
	var end time.Time
	for _, h := range hs {
		if end.IsZero() || h.end.Before(end) {
			end = h.end
		}
	}
	return end
}

// until is when the waiter looks again without a notification (zero:
// never).
func (t *turn) until() time.Time {
	u := time.Time{}
	for _, x := range []time.Time{t.next, t.stall, t.deadline} {
		if !x.IsZero() && (u.IsZero() || x.Before(u)) {
			u = x
		}
	}
	return u
}

// on is what the waiter does on n, at now.
func (t *turn) on(n note, now time.Time) action {
	switch {
	case n.kind == noteNone && !t.deadline.IsZero() && !now.Before(t.deadline):
		return actBusy
	case n.kind == noteOwn:
		return actWait
	case n.kind == noteGone && len(t.ahead) > 0:
		if t.ahead[n.seq] {
			delete(t.ahead, n.seq)
			t.stall = time.Time{}
		}
		if len(t.ahead) == 0 {
			return actTry
		}
		return actWait
	case n.kind == noteFreed && len(t.ahead) > 0:
		if t.stall.IsZero() {
			t.stall = now.Add(stallPause)
		}
		return actWait
	case n.kind == noteRenewed:
		return actRenewed
	}
	return actTry // none came, a limit, a change, or one ahead is gone
}

// renewed moves the next look to the new end of the holders' leases, hs.
func (t *turn) renewed(hs []lease) {
	if len(hs) > 0 {
		t.next = firstEnd(hs)
	}
}
