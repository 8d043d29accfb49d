package etcd

import (
	"context"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/internal/coordkit"
)

// Acquire takes a lease on name: it grants an etcd lease, puts its key on
// the lock and, when the lock is held and opts.Wait allows, waits for its
// turn. Lease.Sent is the send time of the grant, or of the last renewal a
// waiter's keep-alive had acknowledged when its turn came. A failed or
// cancelled Acquire revokes its lease, which removes its place in the
// queue.
//
// One attempt goes through named steps (see attempt): grant, put (one
// transaction, as concurrency.Mutex's), then held, a semaphore's try for a
// slot, busy, or queued; a queued attempt waits (waiter.wait) and
// ends held, or requeued when its lease ended before its turn.
func (c *coordinator) Acquire(ctx context.Context, name string, opts coord.AcquireOptions) (*coord.Lease, error) {
	opts, err := coordkit.CheckAcquire(name, opts)
	if err != nil {
		return nil, err
	}
	if err := c.check(); err != nil {
		return nil, err
	}
	// A waiter waits through a cluster that does not answer (hedge.go).
	ctx = persist(ctx)
	// A waiter that lost its place before its turn, or could not take one
	// (see errRequeue), queues again within what is left of its wait (a
	// try-lock's attempt never asks to).
	waitUntil := time.Now().Add(opts.Wait)
	o := opts
	for {
		l, err := c.attempt(ctx, name, o)
		var rq *errRequeue
		if !errors.As(err, &rq) {
			return l, err
		}
		if rq.told {
			o.OnWait = nil // the caller was told already
		}
		if err := c.beforeRequeue(ctx, rq, &o, opts.Wait, waitUntil); err != nil {
			return nil, err
		}
	}
}

// beforeRequeue pauses when rq asks for it and tells whether the wait goes
// on; o.Wait becomes what is left of a bounded wait.
func (c *coordinator) beforeRequeue(ctx context.Context, rq *errRequeue, o *coord.AcquireOptions, wait time.Duration, until time.Time) error {
	if rq.pause {
		pause(ctx, requeueRetry)
	}
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("waiting for lock %q: %w", rq.cur.Name, ctx.Err())
	case c.closed.Load():
		return errClosed
	case wait > 0:
		if o.Wait = time.Until(until); o.Wait <= 0 {
			return busy(rq.cur, wait)
		}
	}
	return nil
}

// errRequeue is an attempt's answer when a waiter must queue again: its
// lease ended before its turn (told: the caller was told it waits), or
// the cluster did not answer the request that would take its place
// (pause: try again after requeueRetry; that is not a poll of the lock,
// only of a cluster that cannot take the place yet). cur is the lock as
// last read.
type errRequeue struct {
	cur         coord.LockInfo
	told, pause bool
}

func (e *errRequeue) Error() string { return fmt.Sprintf("lock %q: queue again", e.cur.Name) }

// attempt is one try of Acquire: its lease, the key it puts on the lock
// and what it knows of it.
type attempt struct {
	c     *coordinator
	name  string
	opts  coord.AcquireOptions
	slots int // coordkit.SlotsOf(opts.Slots): above 1, a semaphore (slots.go)
	id    clientv3.LeaseID
	key   string
	last  ack       // the grant, then the last acknowledged renewal
	since time.Time // queued_at: when Acquire began the attempt
	at    time.Time // acquired_at
}

func (a *attempt) waits() bool     { return a.opts.Wait != 0 }
func (a *attempt) semaphore() bool { return a.slots > 1 }

// meta is the value of the attempt's key, less its times.
func (a *attempt) meta() meta {
	m := meta{Holder: a.opts.Holder, TTL: a.opts.TTL.String(), Supervised: a.opts.Process != nil}
	if a.semaphore() {
		m.Slots = a.slots
	}
	return m
}

// queuedOp puts our key as queued, held back by a limit or not.
func (a *attempt) queuedOp(heldBack bool) clientv3.Op {
	m := a.meta()
	m.QueuedAt, m.HeldBack = &a.since, heldBack
	return clientv3.OpPut(a.key, m.encode(), clientv3.WithLease(a.id))
}

// claimOps are the puts of a claim of slot (0 for a lock), acquired now:
// our key's value as held (and a semaphore's slot key).
func (a *attempt) claimOps(slot int) []clientv3.Op {
	a.at = time.Now()
	m := a.meta()
	m.AcquiredAt, m.Slot = &a.at, slot
	ops := []clientv3.Op{clientv3.OpPut(a.key, m.encode(), clientv3.WithLease(a.id))}
	if a.semaphore() {
		ops = append(ops, clientv3.OpPut(a.c.slotKey(a.name, slot), formatID(a.id), clientv3.WithLease(a.id)))
	}
	return ops
}

// putState is what the attempt's transaction answered, and the lock as
// it read it (keys by create revision, ours included when it queued; rev 0
// before the first read: no limit at all is compared).
type putState struct {
	resp *clientv3.TxnResponse
	st   lockState
	slot int // a semaphore's slot the transaction took
}

// putStep is where the attempt goes after its transaction.
type putStep int

const (
	putHeld    putStep = iota // the lock was free: the key holds it
	putRetry                  // free, but the limits changed since they were read: put again
	putTrySlot                // a semaphore's try-lock: take a free slot if there is one
	putBusy                   // a try-lock of a held lock: nothing was written
	putQueued                 // a waiter: its key is in the queue
)

// afterPut is the step after the transaction: succeeded (no key was on
// the lock, and the limits were as compared), waits (a waiter's put queued
// its key), keys (how many keys the lock has), allows (the limit read
// lets the lock be held).
func afterPut(succeeded, waits, semaphore bool, keys int, allows bool) putStep {
	switch {
	case succeeded:
		return putHeld
	case waits:
		return putQueued
	case keys == 0 && allows:
		return putRetry
	case semaphore:
		return putTrySlot
	}
	return putBusy
}

// attempt is one attempt of Acquire: for a waiter, errRequeue when it
// must queue again.
func (c *coordinator) attempt(ctx context.Context, name string, opts coord.AcquireOptions) (*coord.Lease, error) {
	a := &attempt{c: c, name: name, opts: opts, slots: coordkit.SlotsOf(opts.Slots), since: time.Now()}
	sent := time.Now()
	g, err := c.cli.Grant(ctx, seconds(opts.TTL))
	if err != nil {
		return nil, c.unanswered(ctx, a.waits(), name, "grant lease", err)
	}
	a.id, a.key, a.last = g.ID, c.leaseKey(name, g.ID), ack{sent: sent, ttl: time.Duration(g.TTL) * time.Second}
	l, err := a.run(ctx)
	if err != nil {
		c.revoke(a.id)
		return nil, err
	}
	c.leases.add(name, a.id, int64(l.Token))
	return l, nil
}

// run takes the attempt from its put to its end.
func (a *attempt) run(ctx context.Context) (*coord.Lease, error) {
	p, err := a.put(ctx)
	if err != nil {
		return nil, err
	}
	if p.resp.Succeeded {
		return a.held(ctx, p.resp.Header.Revision, p.slot)
	}
	kvs, lim := p.st.kvs, p.st.lim
	cur, err := a.c.lockInfo(ctx, a.name, kvs, a.waits() && a.opts.OnWait != nil)
	if err != nil {
		return nil, err
	}
	cur.Limit = lim
	if !a.waits() {
		// A limit that holds the lock back is said first, as the local
		// backend does: a frozen lock says frozen, with the reason, even
		// while its holders (every slot) hold it.
		if !coordkit.Allows(lim, 0) || a.semaphore() && !coordkit.Allows(lim, holders(kvs)) {
			return nil, limitErr(a.name, lim, kvs)
		}
		return nil, busy(cur, 0)
	}
	return a.queue(ctx, p, cur)
}

// put is the attempt's transaction: when no key is on the lock, ours is
// the holder; otherwise it queues (or, not waiting, nothing is written)
// and the lock's keys come back to find the holder. The operator limits
// (limits.go) are compared too: at first that there is none, then that
// they are as last read. A semaphore's try-lock that may hold (every key
// holds, fewer than its slots and the limit allow, and a slot is free)
// puts again, comparing that no key was created since its read and that
// the slot is free.
func (a *attempt) put(ctx context.Context) (putState, error) {
	var p putState
	for {
		resp, err := a.putTxn(ctx, &p)
		if err != nil {
			// A waiter whose first request went unanswered (a leader
			// that stalls: "request timed out") revokes its lease, which
			// takes off whatever that request may have written, and
			// tries again.
			return p, a.c.unanswered(ctx, a.waits(), a.name, "acquire", err)
		}
		p.resp = resp
		if resp.Succeeded {
			return p, nil
		}
		if err := a.readElse(&p); err != nil {
			return p, err
		}
		switch afterPut(false, a.waits(), a.semaphore(), len(p.st.kvs), coordkit.Allows(p.st.lim, 0)) {
		case putTrySlot:
			may, _ := eligible(p.st, 0, a.slots)
			if _, _, free := a.c.slotChoice(a.name, a.slots, p.st.kvs, p.st.slotKVs); !may || !free {
				return p, nil
			}
		case putRetry:
		default:
			return p, nil
		}
	}
}

// putTxn is one transaction of put, after the read p (none yet: rev 0).
func (a *attempt) putTxn(ctx context.Context, p *putState) (*clientv3.TxnResponse, error) {
	c, st := a.c, p.st
	ifs := []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(c.lockRange(a.name)), "<", st.rev+1).WithPrefix(), c.limitsCmp(st.rev)}
	p.slot = 0
	if a.semaphore() && st.rev != 0 {
		var cmp clientv3.Cmp
		p.slot, cmp, _ = c.slotChoice(a.name, a.slots, st.kvs, st.slotKVs)
		ifs = append(ifs, cmp)
	}
	then := a.claimOps(p.slot)
	var els []clientv3.Op
	if a.waits() {
		els = append(els, a.queuedOp(false))
		ctx = once(ctx)
	}
	return c.cli.Txn(ctx).If(ifs...).Then(then...).Else(append(els, c.stateReads(a.name, a.semaphore())...)...).Commit()
}

// readElse reads the answers of a transaction that did not take the lock.
func (a *attempt) readElse(p *putState) error {
	var err error
	if p.st, err = a.c.parseState(a.name, p.resp, a.semaphore()); err != nil {
		return err
	}
	// Every key of a lock records the same slots.
	return checkSlots(a.name, p.st.kvs, a.key, a.slots)
}

// lease is the attempt's lease, holding since its key's create revision
// rev.
func (a *attempt) lease(rev int64, slot int) (*coord.Lease, error) {
	tok, err := tokenOf(a.name, rev)
	if err != nil {
		return nil, err
	}
	return &coord.Lease{Name: a.name, Holder: a.opts.Holder, ID: formatID(a.id), TTL: a.last.ttl, Sent: a.last.sent,
		Token: tok, AcquiredAt: a.at, Slot: slot}, nil
}

// held is the lease of an attempt that took the lock at once. A grant
// that took long (a stalled leader) leaves its send time, from which the
// caller's safe-until counts, too far back: the lease is renewed first, as
// a waiter's is at its turn.
func (a *attempt) held(ctx context.Context, rev int64, slot int) (*coord.Lease, error) {
	if err := a.freshen(ctx, coord.LockInfo{Name: a.name}, a.last.ttl/10); err != nil {
		return nil, err
	}
	return a.lease(rev, slot)
}

// queue is a waiter's wait, once its key is in the queue: its lease is
// kept alive while the caller is told and while it waits for its turn.
func (a *attempt) queue(ctx context.Context, p putState, cur coord.LockInfo) (*coord.Lease, error) {
	myRev := p.resp.Header.Revision // the revision of the transaction that put our key
	kctx, stopKeepAlive := context.WithCancel(ctx)
	lost := make(chan error, 1)
	kaDone := make(chan struct{})
	last := a.last
	go func() {
		defer close(kaDone)
		if err := a.c.keepAlive(kctx, a.id, &last); err != nil {
			lost <- err
		}
	}()
	if a.opts.OnWait != nil {
		a.opts.OnWait(cur)
	}
	wctx, cancel := ctx, context.CancelFunc(func() {})
	if a.opts.Wait > 0 {
		wctx, cancel = context.WithTimeout(ctx, a.opts.Wait)
	}
	w := &waiter{attempt: a, myRev: myRev, st: p.st, lost: lost}
	var slot int
	err := a.c.waiting(wctx, func(ctx context.Context) (err error) {
		slot, err = w.wait(ctx)
		return err
	})
	cancel()
	stopKeepAlive()
	<-kaDone
	a.last = last
	if err != nil {
		return nil, a.waitFailed(ctx, wctx, err, cur)
	}
	if err := a.freshen(ctx, cur, a.last.ttl/3); err != nil {
		return nil, err
	}
	return a.lease(myRev, slot)
}

// waiting runs a waiter's wait (waiter.wait) on a context of its
// own: Close ends it at once, and its error is then errClosed.
func (c *coordinator) waiting(ctx context.Context, wait func(context.Context) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(c.ctx, cancel)()
	err := wait(ctx)
	if err != nil && c.closed.Load() {
		return errClosed
	}
	return err
}

// waitEnd is how a wait that ended before the waiter's turn ends Acquire.
type waitEnd int

const (
	endError     waitEnd = iota // the wait's own error
	endCancelled                // the caller's context ended
	endRequeue                  // the lease ended before the turn: queue again
	endLimited                  // the wait ran out while a limit held the lock back
	endGaveUp                   // the wait ran out: busy (or a limit read once more)
)

// afterWait decides a wait's end: cancelled (the caller's context ended),
// leaseGone (our lease ended), over (the wait's budget ran out), limited
// (the error is a *coordkit.LimitError).
func afterWait(cancelled, leaseGone, over, limited bool) waitEnd {
	switch {
	case cancelled:
		return endCancelled
	case leaseGone:
		// Whatever ended it (a stall longer than its TTL; a leader that
		// resumes from a stall and revokes leases its successor kept
		// alive, etcd#15247, while our renewals were answered; a revoke
		// by hand), the waiter never held the lock, and its wait is what
		// it asked for.
		return endRequeue
	case over && limited:
		return endLimited
	case over:
		return endGaveUp
	}
	return endError
}

func (a *attempt) waitFailed(ctx, wctx context.Context, err error, cur coord.LockInfo) error {
	var le *coordkit.LimitError
	switch afterWait(ctx.Err() != nil, errors.Is(err, errLeaseGone), wctx.Err() != nil, errors.As(err, &le)) {
	case endCancelled:
		return fmt.Errorf("waiting for lock %q: %w", a.name, ctx.Err())
	case endRequeue:
		return &errRequeue{cur: cur, told: true}
	case endLimited:
		return le
	case endGaveUp:
		return a.c.gaveUp(ctx, cur, a.slots, a.opts.Wait)
	}
	return err
}

// stale tells that a lease's last acknowledged request, age old, is older
// than limit (for a waiter, a renewal interval: its keep-alive failed of
// late).
func stale(age, limit time.Duration) bool { return age >= limit }

// freshen renews the attempt's lease when its last acknowledged request is
// older than limit: the caller's safe-until counts from its send time.
func (a *attempt) freshen(ctx context.Context, cur coord.LockInfo, limit time.Duration) error {
	if !stale(time.Since(a.last.sent), limit) {
		return nil
	}
	ttl, s, err := a.c.ka.renew(ctx, a.id)
	switch {
	case err != nil:
		return a.c.mapErr(ctx, "renew lease", err)
	case ttl <= 0:
		// The claim went through just before etcd, answering again after
		// a stall, revoked our expired lease (and the claimed key with
		// it): TestWholeClusterStall once saw the waiter give up here.
		if !a.waits() {
			return fmt.Errorf("%w: lock %q: the lease ended before it could be used", coord.ErrUnavailable, a.name)
		}
		return &errRequeue{cur: cur, told: true}
	}
	a.last = ack{sent: s, ttl: time.Duration(ttl) * time.Second}
	return nil
}

// claimTimeout bounds one attempt of a waiter's transaction (see waiter.txn).
const claimTimeout = time.Second

// requeueRetry is the pause between a waiter's attempts to take a place
// while the cluster does not answer them (see errRequeue).
const requeueRetry = 250 * time.Millisecond

// errLeaseGone: a waiter's lease ended before its turn.
var errLeaseGone = errors.New("lease gone")

// unanswered maps the error of a request that takes a place: for a
// waiter, one that no member answered (a stalled leader's "request timed
// out", no leader) is errRequeue, to try again.
func (c *coordinator) unanswered(ctx context.Context, wait bool, name, op string, err error) error {
	if wait && !answered(err) && ctx.Err() == nil && !c.closed.Load() {
		return &errRequeue{cur: coord.LockInfo{Name: name}, pause: true}
	}
	return c.mapErr(ctx, op, err)
}

// gaveUp is the error of a waiter whose wait ended before its turn: a
// *coordkit.LimitError when a limit, read once more now (as the local backend
// looks once more), holds the lock back (frozen; a semaphore's holders at
// its limit), else busy.
func (c *coordinator) gaveUp(ctx context.Context, cur coord.LockInfo, slots int, waited time.Duration) error {
	rctx, cancel := context.WithTimeout(ctx, claimTimeout)
	ls, err := c.Limits(rctx)
	cancel()
	n := len(cur.AllHolders())
	if lim := coordkit.EffectiveLimit(ls, cur.Name); err == nil && (!coordkit.Allows(lim, 0) || slots > 1 && !coordkit.Allows(lim, n)) {
		return &coordkit.LimitError{Lock: cur.Name, Limit: *lim, Holders: n}
	}
	return busy(cur, waited)
}

// busy is ErrBusy naming the holder (a waiter that could not even read
// the lock knows none).
func busy(cur coord.LockInfo, waited time.Duration) error {
	after := ""
	if waited > 0 {
		after = fmt.Sprintf(" (gave up after %v)", waited)
	}
	if hs := cur.AllHolders(); cur.Holder == "" && len(hs) > 0 {
		// A semaphore's: the first holder, and how many more.
		more := ""
		if len(hs) > 1 {
			more = fmt.Sprintf(" and %d more", len(hs)-1)
		}
		return fmt.Errorf("%w: lock %q is held by %s (token %d)%s%s", coord.ErrBusy, cur.Name, hs[0].Holder, hs[0].Token, more, after)
	}
	if cur.Holder == "" && cur.Token == 0 {
		return fmt.Errorf("%w: lock %q was not acquired%s", coord.ErrBusy, cur.Name, after)
	}
	return fmt.Errorf("%w: lock %q is held by %s (token %d)%s", coord.ErrBusy, cur.Name, cur.Holder, cur.Token, after)
}
