package local

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/fence-dev/fence/internal/proc"
	"github.com/fence-dev/fence/pkg/clock"
	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/internal/coordkit"
)

// Acquire takes a lease on name; see coord.Coordinator. Waiters queue first
// come, first served; OnWait is called once the caller's ticket is stored.
func (c *coordinator) Acquire(ctx context.Context, name string, o coord.AcquireOptions) (*coord.Lease, error) {
	o, err := coordkit.CheckAcquire(name, o)
	if err != nil {
		return nil, err
	}
	if err := c.ready(ctx); err != nil {
		return nil, err
	}
	self, err := selfID()
	if err != nil {
		return nil, err
	}
	a := &acquirer{c: c, f: c.files(name), o: o, self: self, start: time.Now()}
	if o.Process != nil { // checked by CheckAcquire
		a.pids, a.group = resolveProcess(*o.Process)
	}
	return a.run(ctx)
}

func selfID() (proc.ID, error) {
	id, err := proc.Self()
	if err != nil {
		return proc.ID{}, unavailable("cannot read this process's start time: %v", err)
	}
	return id, nil
}

// resolveProcess records the start times of the processes a lease is
// attached to (p as coordkit.ValidateProcess accepts it). A PID that is
// already gone is recorded as gone (start 0); a process group whose leader
// is gone is recorded with start 0 (see proc.GroupMembers).
func resolveProcess(p coord.ProcessInfo) ([]proc.ID, *proc.ID) {
	var ids []proc.ID
	for _, pid := range p.PIDs {
		id, err := proc.Lookup(pid)
		if err != nil {
			id = proc.ID{PID: pid}
		}
		ids = append(ids, id)
	}
	var group *proc.ID
	if p.PGID > 0 {
		leader, err := proc.Lookup(p.PGID)
		if err != nil {
			leader = proc.ID{PID: p.PGID}
		}
		group = &leader
	}
	return ids, group
}

type acquirer struct {
	c      *coordinator
	f      lockFiles
	o      coord.AcquireOptions
	self   proc.ID
	start  time.Time
	pids   []proc.ID
	group  *proc.ID
	ticket string // my ticket's ID once queued
}

// attempt is the outcome of one read-modify-write.
type attempt struct {
	lease   *coord.Lease
	v       verdict
	info    coord.LockInfo
	mayKill bool // the lease ended, its group runs, and it is our turn
	// limited is the operator limit that holds the lock back (nil: none
	// does).
	limited *coord.Limit
}

// A lease id is 24 lower-case hex digits: the tag of its lock's name (the
// first 4 bytes of its SHA-256) and 8 random bytes. The tag lets Renew and
// Release tell a lease of another lock from one that is gone without reading
// any other lock's state. Ids of 16 digits are of no known lock (unknownID).
const (
	tagLen      = 8
	leaseIDLen  = tagLen + 16
	legacyIDLen = 16
)

// nameTag is the tag of lock name in its lease ids.
func nameTag(name string) string {
	sum := sha256.Sum256([]byte(name))
	return hex.EncodeToString(sum[:tagLen/2])
}

// newID returns a new lease id for lock name.
func newID(name string) string { return nameTag(name) + newTicketID() }

// newTicketID returns a new id for a waiter's ticket.
func newTicketID() string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// checkLeaseID refuses, with ErrInvalid, a bad lock name, a lease id that
// fence cannot have issued, and one issued for a lock other than name.
func checkLeaseID(name, id string) error {
	if err := coord.ValidateName(name); err != nil {
		return err
	}
	if len(id) != leaseIDLen && len(id) != legacyIDLen || strings.Trim(id, "0123456789abcdef") != "" {
		return fmt.Errorf("%w: lease id %q is not a lease id of the local coordinator (%d lower-case hex digits)", coord.ErrInvalid, id, leaseIDLen)
	}
	if len(id) == leaseIDLen && id[:tagLen] != nameTag(name) {
		return fmt.Errorf("%w: lease %s belongs to another lock, not to %q", coord.ErrInvalid, id, name)
	}
	return nil
}

// unknownID is the error for lease id found on no lease of its lock: nil
// for an id of this coordinator's form (the lease is gone), ErrInvalid for
// one of 16 digits. Fences before the tag issued those, but they are also
// the form of an etcd lease id, and a lease of that form that no lock holds
// cannot be this coordinator's now: renew and release say so (exit 125)
// instead of "gone" (76, or 0 for a release).
func unknownID(id string) error {
	if len(id) != legacyIDLen {
		return nil
	}
	return fmt.Errorf("%w: lease id %s is not a lease of the local coordinator (its ids are %d hex digits; %d is the form of an etcd lease id): give the coordinator that took the lease (--endpoints or FENCE_ENDPOINTS for etcd)",
		coord.ErrInvalid, id, leaseIDLen, legacyIDLen)
}

// try is one attempt under the lock's flock: it drops dead waiters, then
// takes the lock if it is free and it is our turn; otherwise, when enqueue
// is set, it makes sure our ticket is in the queue (nextMove).
func (a *acquirer) try(ctx context.Context, enqueue bool) (attempt, error) {
	var out attempt
	sent := time.Now()
	err := a.c.update(ctx, a.f, func(st *state) (stateWrite, error) {
		pruned := a.pruneDead(st)
		var ch stateWrite
		var err error
		out, ch, err = a.decide(st, enqueue, sent)
		return max(pruned, ch), err
	})
	if err != nil {
		return attempt{}, err
	}
	if out.lease != nil && a.ticket != "" {
		liveTickets.Delete(a.ticket)
		a.ticket = ""
	}
	return out, nil
}

// pruneDead drops dead waiters: all of them when we are not queued, those
// ahead of us when we are (it is only for them that we wait, and this runs
// at every handoff). It returns rewrite when it dropped any.
func (a *acquirer) pruneDead(st *state) stateWrite {
	ahead := -1
	if a.ticket != "" {
		ahead = slices.IndexFunc(st.Queue, func(t ticket) bool { return t.ID == a.ticket })
	}
	kept := st.Queue[:0:0]
	for i, t := range st.Queue {
		if (ahead >= 0 && i >= ahead) || liveTicket(t, a.self) != proc.Gone {
			kept = append(kept, t)
		}
	}
	if len(kept) == len(st.Queue) {
		return noChange
	}
	st.Queue = kept
	return rewrite
}

// decide judges the lock under its flock and makes the move nextMove
// decides.
func (a *acquirer) decide(st *state, enqueue bool, sent time.Time) (attempt, stateWrite, error) {
	if st.LastToken >= coord.MaxToken {
		// No lease can ever be granted again: refuse at once, also while
		// the last token's holder still holds.
		return attempt{}, noChange, exhausted(a.f.name, st.LastToken)
	}
	now := clock.Now()
	// The operator limit is read under the flock (why: limits.go). It caps
	// the busy slots.
	t, w, lim, err := a.turnOf(st, now)
	if err != nil {
		return attempt{}, noChange, err
	}
	if err := a.fitSlots(st, w); err != nil {
		return attempt{}, noChange, err
	}
	var out attempt
	if t.limited {
		out.limited = lim
	}
	ch := noChange
	switch nextMove(t, enqueue, a.ticket != "") {
	case moveGrant:
		out.lease = a.grant(st, w, t.pos, sent)
		// durable: see the package doc, Durability.
		return out, durable, nil
	case moveQueue:
		a.enqueue(st)
		ch = rewrite
	}
	out.v = w.v
	out.mayKill = mayKill(t)
	out.info = info(st, w, now, a.self)
	return out, ch, nil
}

// fitSlots makes the lock's slots ours when they differ: the lock records
// its slots while it has holders or waiters (slots.go), and refuses
// another number then; an idle lock takes ours.
func (a *acquirer) fitSlots(st *state, w lockView) error {
	want := coordkit.SlotsOf(a.o.Slots)
	have := coordkit.SlotsOf(st.Slots)
	if have == want {
		return nil
	}
	if len(w.busy) > 0 || len(st.Queue) > 0 {
		return &coordkit.SlotsError{Lock: a.f.name, Have: have, Want: want}
	}
	// Idle: what is on record of its holders has ended.
	for _, e := range w.ended {
		st.remove(e)
	}
	st.Slots = 0
	if want > 1 {
		st.Slots = want
	}
	return nil
}

// grant issues the next token to us: our ticket leaves the queue, a
// semaphore's ended holders leave their slots, and the new holder takes
// the lock or a free slot.
func (a *acquirer) grant(st *state, w lockView, pos queuePos, sent time.Time) *coord.Lease {
	if pos.mine >= 0 {
		st.Queue = slices.Delete(st.Queue, pos.mine, pos.mine+1)
	}
	if st.slotted() {
		for _, e := range w.ended {
			st.remove(e)
		}
	}
	st.LastToken++
	h := &holder{
		LeaseID:    newID(a.f.name),
		Holder:     a.o.Holder,
		Token:      st.LastToken,
		TTL:        a.o.TTL,
		AcquiredAt: time.Now().Round(0),
		ExpiresAt:  clock.Now().Add(a.o.TTL),
		PIDs:       a.pids,
		Group:      a.group,
	}
	if h.attached() {
		h.PIDNS = proc.PIDNamespace()
	}
	if st.slotted() && st.Holder != nil {
		h.Slot = w.freeSlot()
		st.Others = append(st.Others, h)
	} else {
		st.Holder = h
	}
	return &coord.Lease{Name: a.f.name, Holder: h.Holder, Token: h.Token, ID: h.LeaseID,
		TTL: h.TTL, AcquiredAt: h.AcquiredAt, Sent: sent, Slot: h.Slot}
}

// enqueue appends our ticket to the queue (a new one when we had none).
func (a *acquirer) enqueue(st *state) {
	if a.ticket == "" {
		a.ticket = newTicketID()
		liveTickets.Store(a.ticket, struct{}{})
	}
	st.Queue = append(st.Queue, ticket{ID: a.ticket, PID: a.self.PID, Start: a.self.Start,
		Holder: a.o.Holder, PIDNS: proc.PIDNamespace(), Since: time.Now().UTC().Round(0)})
}

// heldBack reports whether the limit lim holds back the next grant of the
// lock judged w: a freeze always; another limit when a slot is free (or is
// to be freed by stopping an ended holder's command) but the live holders
// are at the limit.
func heldBack(lim *coord.Limit, w lockView) bool {
	return !coordkit.Allows(lim, 0) || (w.v.free || w.v.kill) && !coordkit.Allows(lim, len(w.live))
}

// leave removes our ticket after a failed or abandoned wait.
func (a *acquirer) leave() {
	if a.ticket == "" {
		return
	}
	id := a.ticket
	ctx, cancel := context.WithTimeout(context.Background(), lockTimeout)
	defer cancel()
	_ = a.c.update(ctx, a.f, func(st *state) (stateWrite, error) {
		i := slices.IndexFunc(st.Queue, func(t ticket) bool { return t.ID == id })
		if i < 0 {
			return noChange, nil
		}
		st.Queue = slices.Delete(st.Queue, i, i+1)
		return rewrite, nil
	})
	liveTickets.Delete(id)
	a.ticket = ""
}

func (a *acquirer) run(ctx context.Context) (*coord.Lease, error) {
	defer a.leave()
	res, err := a.try(ctx, false)
	if err != nil || res.lease != nil {
		return res.lease, err
	}
	if a.o.Wait == 0 {
		return a.noWait(ctx, res)
	}
	// Queue up. The watch of the lock's state is in place before the
	// ticket is stored, so that no wake-up is missed.
	sub, err := a.c.subscribe(a.f.state, a.c.locksDir)
	if err != nil {
		return nil, err
	}
	defer sub.close()
	if res, err = a.try(ctx, true); err != nil || res.lease != nil {
		return res.lease, err
	}
	if a.o.OnWait != nil {
		a.o.OnWait(res.info)
	}
	return a.wait(ctx, sub)
}

// noWait handles a busy lock for Wait 0: only the command group of an
// ended lease is worth a short wait, once it has been killed.
func (a *acquirer) noWait(ctx context.Context, res attempt) (*coord.Lease, error) {
	if res.limited != nil || !res.mayKill || a.kill(res.v) != nil {
		return nil, a.refusal(res)
	}
	kctx, cancel := context.WithTimeout(ctx, killWait)
	for _, m := range res.v.group {
		if proc.WaitExit(kctx, m) != nil {
			break
		}
	}
	cancel()
	return a.lastLook(ctx)
}

// refusal is the error for a lock not granted: held back by an operator
// limit, or busy.
func (a *acquirer) refusal(res attempt) error {
	if res.limited != nil {
		return &coordkit.LimitError{Lock: a.f.name, Limit: *res.limited, Holders: len(res.info.AllHolders())}
	}
	return busy(a.f.name, res.info)
}

// kill sends SIGKILL to the command group of an ended lease. An error means
// we may not (another user's processes, or our own group).
func (a *acquirer) kill(v verdict) error {
	if len(v.group) == 0 {
		return nil
	}
	if v.pgid == 0 {
		// No group on record: the processes one by one.
		for _, m := range v.group {
			if err := proc.SignalID(m, syscall.SIGKILL); err != nil && !errors.Is(err, proc.ErrNoProcess) {
				return err
			}
		}
		return nil
	}
	pgid := v.pgid
	if st, err := proc.ReadStat(os.Getpid()); err == nil && st.PGID == pgid {
		return fmt.Errorf("process group %d is our own", pgid)
	}
	err := proc.SignalGroup(pgid, syscall.SIGKILL)
	if errors.Is(err, proc.ErrNoProcess) {
		return nil
	}
	return err
}

// wait waits in the queue until the lock is ours, Wait has passed or ctx
// has ended. Every round starts with a fresh read of the state, taken after
// the watch of the state is in place, so no wake-up is missed; then it
// does what nextAct decides and sleeps on what napOf decides, or until the
// state changes.
func (a *acquirer) wait(ctx context.Context, sub *subscription) (*coord.Lease, error) {
	wctx := ctx // also ends when Wait has passed
	if a.o.Wait > 0 {
		var cancel context.CancelFunc
		wctx, cancel = context.WithDeadline(ctx, a.start.Add(a.o.Wait))
		defer cancel()
	}
	for {
		st, err := load(a.f)
		if err != nil {
			return nil, err
		}
		t, w, lim, err := a.turnOf(st, clock.Now())
		if err != nil {
			return nil, err
		}
		v := w.v
		var stall time.Duration
		switch nextAct(t) {
		case actTry:
			// Whether to kill is decided under the flock.
			res, err := a.try(ctx, true)
			if err != nil || res.lease != nil {
				return res.lease, err
			}
			v = res.v
			if res.mayKill {
				_ = a.kill(v) // not permitted: wait for the group to end
			}
		case actStall:
			stall = a.c.stallCheck
		}
		// A lock held back by an operator limit is not free for anyone: its
		// waiters keep their places and wait for a change of the state (a
		// thaw rewrites it) or the waiter ahead of them; under a limit above
		// 0 the first ones also follow the holders (one that ends makes
		// room).
		n := napOf(t, !t.limited || lim.Max != 0, v.waitOn, untilWake(v.until), stall)
		switch _, err := a.c.sleep(wctx, sub, n.deps, n.wake); {
		case err == errClosed:
			return nil, err
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case err != nil:
			return a.lastLook(ctx) // Wait has passed
		}
	}
}

// turnOf judges st at now for this acquirer: its turn, the lock's view and
// the operator limit that binds the lock (nil: none).
func (a *acquirer) turnOf(st *state, now clock.Boot) (turn, lockView, *coord.Limit, error) {
	w, err := judgeAll(st, now)
	if err != nil {
		return turn{}, lockView{}, nil, err
	}
	lim, err := a.c.limitOf(a.f.name)
	if err != nil {
		return turn{}, lockView{}, nil, err
	}
	t := turn{free: w.v.free, kill: w.v.kill, limited: heldBack(lim, w), pos: position(st.Queue, a.ticket, a.self)}
	return t, w, lim, nil
}

// lastLook is the last attempt when Wait has passed (or, for Wait 0, the
// group of an ended lease was killed).
func (a *acquirer) lastLook(ctx context.Context) (*coord.Lease, error) {
	res, err := a.try(ctx, false)
	if err != nil || res.lease != nil {
		return res.lease, err
	}
	return nil, a.refusal(res)
}

// exhausted is the error for a lock that has issued coord.MaxToken: a new
// lease would need a larger token, which a signed 64-bit column cannot hold.
func exhausted(name string, last uint64) error {
	return unavailable("lock %q has issued its last fencing token (%d, the largest a signed 64-bit integer holds); tokens never wrap: use another lock name",
		name, last)
}

// busy is the ErrBusy error for a lock not acquired in time.
func busy(name string, li coord.LockInfo) error {
	switch {
	case li.Held:
		return fmt.Errorf("%w: lock %q is held by %s (token %d)", coord.ErrBusy, name, li.Holder, li.Token)
	case li.Waiters > 0:
		return fmt.Errorf("%w: lock %q has %d waiter(s) ahead", coord.ErrBusy, name, li.Waiters)
	default:
		return fmt.Errorf("%w: lock %q: the command of an ended lease is still running", coord.ErrBusy, name)
	}
}
