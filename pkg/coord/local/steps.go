package local

import (
	"time"

	"github.com/fence-dev/fence/internal/proc"
)

// The acquisition and the wait of one Acquire go through explicit steps:
// this file holds their decisions, as pure functions of what was read of
// the lock (its verdict, the queue as seen by the caller, the operator
// limit), which acquire.go's loops call and the tests check case by case.

// move is what one attempt under the lock's flock does (acquirer.try).
type move uint8

const (
	// moveGrant: the lock is free and it is our turn: a new token and
	// lease.
	moveGrant move = iota
	// moveQueue: not granted, and our ticket is not in the queue though it
	// should be: it is appended.
	moveQueue
	// moveStay: not granted; the queue stays as it is.
	moveStay
)

// turn is what one attempt or one round of the wait knows of the lock.
type turn struct {
	free    bool     // a successor may take the lock now
	kill    bool     // the lease ended but its command's group runs
	limited bool     // an operator limit holds the lock back
	pos     queuePos // the queue from our point of view
}

// ours reports whether it is our turn: nobody runs ahead of us in the
// queue (we are its head, or it has no running waiter and we are not in
// it).
func (t turn) ours() bool {
	return t.pos.head == -1 || t.pos.mine >= 0 && t.pos.head == t.pos.mine
}

// nextMove decides an attempt: grant when the lock is free, it is our turn
// and no limit holds it back; else queue when our ticket is missing and we
// are to wait (enqueue, or we had a ticket that went missing).
func nextMove(t turn, enqueue, hadTicket bool) move {
	switch {
	case t.free && t.ours() && !t.limited:
		return moveGrant
	case t.pos.mine < 0 && (enqueue || hadTicket):
		return moveQueue
	}
	return moveStay
}

// mayKill reports whether the attempt that did not grant may kill the
// command group of an ended lease: it is our turn and no limit holds the
// lock back.
func mayKill(t turn) bool { return t.kill && t.ours() && !t.limited }

// act is what one round of the wait does before it sleeps (acquirer.wait).
type act uint8

const (
	// actTry: our turn (or our ticket went missing): an attempt under the
	// flock, which grants, kills or queues us again.
	actTry act = iota
	// actStall: the lock is free for the waiter ahead of us; if it does not
	// take it (it was stopped), we look again after the stall check.
	actStall
	// actSleep: nothing to do until something changes.
	actSleep
)

// nextAct decides a round of the wait.
func nextAct(t turn) act {
	open := !t.limited && (t.free || t.kill)
	switch {
	case t.pos.mine < 0 || open && t.pos.head == t.pos.mine:
		return actTry
	case open:
		return actStall
	}
	return actSleep
}

// nap is what a waiter sleeps on: the exit of one of deps, or wake passing
// (-1: no timer).
type nap struct {
	deps []proc.ID
	wake time.Duration
}

// napOf decides what a waiter in round t sleeps on besides the changes of
// the lock's state: the first two running waiters follow the holder (its
// processes, and its expiry, untilHolder) unless a freeze holds the lock
// (follow false); every waiter follows the waiter ahead of it; stall (0:
// none) bounds the sleep.
func napOf(t turn, follow bool, waitOn []proc.ID, untilHolder, stall time.Duration) nap {
	n := nap{wake: -1}
	if t.pos.rank <= 1 && follow {
		n.deps, n.wake = waitOn, untilHolder
	}
	if t.pos.pred != (proc.ID{}) {
		n.deps = append(n.deps[:len(n.deps):len(n.deps)], t.pos.pred)
	}
	if stall > 0 && (n.wake < 0 || stall < n.wake) {
		n.wake = stall
	}
	return n
}
