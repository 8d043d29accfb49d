package etcd

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/metadata"

	"github.com/fence-dev/fence/pkg/coord"
)

// Acquire takes a lease on name: it grants an etcd lease, puts its key on
// the lock and, when the lock is held and opts.Wait allows, waits for its
// turn. Lease.Sent is the send time of the grant, or of the last renewal a
// waiter's keep-alive had acknowledged when its turn came. A failed or cancelled Acquire revokes its lease, which
// removes its place in the queue.
func (c *Coordinator) Acquire(ctx context.Context, name string, opts coord.AcquireOptions) (*coord.Lease, error) {
	l, _, err := c.AcquireWith(ctx, name, opts, nil)
	return l, err
}

// AcquireWith is Acquire, with reads (Get operations) in the transaction
// that takes the lock (Acquire's first one when the lock was free, a
// waiter's claim at its turn): their answers come back with the lease,
// read at the revision at which it took the lock, at the cost of no
// request of their own. They are nil when the lease took the lock another
// way (a semaphore's slot): the caller then reads apart. A user who may not make the reads takes the lock
// without them. The history store reads the lock's history head so
// (package etcdstore: AcquireLooking).
func (c *Coordinator) AcquireWith(ctx context.Context, name string, opts coord.AcquireOptions, reads []clientv3.Op) (*coord.Lease, []*etcdserverpb.ResponseOp, error) {
	opts, err := coord.CheckAcquire(name, opts)
	if err != nil {
		return nil, nil, err
	}
	if err := c.check(); err != nil {
		return nil, nil, err
	}
	// A waiter waits through a cluster that does not answer (hedge.go).
	ctx = persist(ctx)
	if opts.Wait == 0 {
		return c.acquire(ctx, name, opts, reads)
	}
	// A waiter that lost its place before its turn, or could not take one
	// (see errRequeue), queues again within what is left of its wait.
	waitUntil := time.Now().Add(opts.Wait)
	o := opts
	for {
		l, got, err := c.acquire(ctx, name, o, reads)
		var rq *errRequeue
		if !errors.As(err, &rq) {
			return l, got, err
		}
		if rq.told {
			o.OnWait = nil // the caller was told already
		}
		if rq.pause {
			select {
			case <-ctx.Done():
				return nil, nil, fmt.Errorf("waiting for lock %q: %w", name, ctx.Err())
			case <-time.After(requeueRetry):
			}
		}
		switch {
		case ctx.Err() != nil:
			return nil, nil, fmt.Errorf("waiting for lock %q: %w", name, ctx.Err())
		case c.closed.Load():
			return nil, nil, errClosed
		case opts.Wait > 0:
			if o.Wait = time.Until(waitUntil); o.Wait <= 0 {
				return nil, nil, busy(rq.cur, opts.Wait)
			}
		}
	}
}

// errRequeue is acquire's answer when a waiter must queue again: its
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

// acquire is one attempt of AcquireWith: for a waiter, errRequeue when it
// must queue again.
func (c *Coordinator) acquire(ctx context.Context, name string, opts coord.AcquireOptions, reads []clientv3.Op) (*coord.Lease, []*etcdserverpb.ResponseOp, error) {
	holder := opts.Holder
	wait := opts.Wait != 0

	secs := leaseSeconds(opts.TTL)
	id, granted, sent, reused, err := c.grant(ctx, name, secs)
	if err != nil {
		return nil, nil, c.unanswered(ctx, wait, name, "grant lease", err)
	}
	ok := false
	defer func() {
		if !ok {
			c.revoke(id)
		}
	}()

	// One transaction: when no key is on the lock, ours is the holder;
	// otherwise it queues (or, not waiting, nothing is written) and the
	// lock's keys come back to find the holder.
	lockRange := c.lockRange(name)
	now := time.Now()
	supervised := opts.Process != nil
	// A semaphore (slots.go) records its slots in every key; its grant
	// also takes a slot key.
	slots := coord.SlotsOf(opts.Slots)
	var semSlots int
	if slots > 1 {
		semSlots = slots
	}
	held := meta{Holder: holder, TTL: opts.TTL.String(), AcquiredAt: &now, Supervised: supervised, Slots: semSlots}
	queued := meta{Holder: holder, TTL: opts.TTL.String(), QueuedAt: &now, Supervised: supervised, Slots: semSlots}
	// The operator limits (limits.go) are compared too: at first that
	// there is none (limRev 0), then that they are as last read.
	var limRev int64
	put := func() (*clientv3.TxnResponse, error) {
		key := c.leaseKey(name, id)
		els := []clientv3.Op{clientv3.OpGet(lockRange, clientv3.WithPrefix(), byCreate)}
		if wait {
			els = []clientv3.Op{
				clientv3.OpPut(key, queued.encode(), clientv3.WithLease(id)),
				clientv3.OpGet(lockRange, clientv3.WithPrefix(), byCreate),
			}
		}
		then := []clientv3.Op{clientv3.OpPut(key, held.encode(), clientv3.WithLease(id))}
		els = append(els, c.limitsGet())
		if slots > 1 {
			then = append(then, clientv3.OpPut(c.slotKey(name, 0), formatID(id), clientv3.WithLease(id)))
			els = append(els, clientv3.OpGet(c.slotsRange(name), clientv3.WithPrefix()))
		} else {
			then = append(then, reads...) // last: their answers are AcquireWith's
		}
		return c.cli.Txn(once(ctx)).
			If(clientv3.Compare(clientv3.CreateRevision(lockRange), "=", 0).WithPrefix(), c.limitsCmp(limRev)).
			Then(then...).
			Else(els...).
			Commit()
	}
	var (
		resp *clientv3.TxnResponse
		kvs  []*mvccpb.KeyValue
		lim  *coord.Limit
		sem  slotState // a semaphore's state as the Else read it
	)
	for {
		resp, err = put()
		if len(reads) > 0 && errors.Is(err, rpctypes.ErrPermissionDenied) {
			// The reads are the caller's business, not the lock's: a user
			// who may not make them still takes the lock.
			reads = nil
			resp, err = put()
		}
		if reused && errors.Is(err, rpctypes.ErrLeaseNotFound) {
			// The kept lease ended since its last acknowledgment (revoked by
			// someone): a fresh one.
			var g *clientv3.LeaseGrantResponse
			sent = time.Now()
			if g, err = c.cli.Grant(ctx, secs); err != nil {
				return nil, nil, c.unanswered(ctx, wait, name, "grant lease", err)
			}
			id, granted, reused = g.ID, time.Duration(g.TTL)*time.Second, false
			resp, err = put()
		}
		if err != nil {
			// A waiter whose first request went unanswered (a leader
			// that stalls: "request timed out") revokes its lease, which
			// takes off whatever that request may have written, and
			// tries again.
			return nil, nil, c.unanswered(ctx, wait, name, "acquire", err)
		}
		if resp.Succeeded {
			break
		}
		n := len(resp.Responses)
		if slots > 1 {
			if sem, err = c.parseSlotReads(name, resp, n-3); err != nil {
				return nil, nil, err
			}
			kvs, lim = sem.kvs, sem.lim
		} else {
			kvs = resp.Responses[n-2].GetResponseRange().Kvs
			if lim, err = c.effectiveOf(name, resp.Responses[n-1].GetResponseRange().Kvs); err != nil {
				return nil, nil, err
			}
		}
		limRev = resp.Header.Revision
		// Every key of a lock records the same slots.
		if err := checkSlots(name, kvs, c.leaseKey(name, id), slots); err != nil {
			return nil, nil, err
		}
		if wait || len(kvs) > 0 || !lim.Allows(0) {
			break
		}
		// Free, and the limits allow it: try again comparing them as read.
	}
	key := c.leaseKey(name, id)
	l := &coord.Lease{Name: name, Holder: holder, ID: formatID(id), TTL: granted, Sent: sent}
	if !resp.Succeeded && slots > 1 && !wait {
		// A try-lock of a semaphore with a free slot takes it.
		slot, rev, st, got, err := c.trySlot(ctx, name, key, id, slots, held, sem)
		if err != nil {
			return nil, nil, c.mapErr(ctx, "acquire", err)
		}
		if got {
			if l.Token, err = tokenOf(name, rev); err != nil {
				return nil, nil, err
			}
			l.AcquiredAt, l.Slot = now, slot
			c.leases.add(name, secs, id, int64(l.Token), l.TTL, l.Sent, true)
			ok = true
			return l, nil, nil
		}
		kvs, lim = st.kvs, st.lim
	}
	if resp.Succeeded {
		if l.Token, err = tokenOf(name, resp.Header.Revision); err != nil {
			return nil, nil, err
		}
		l.AcquiredAt = now
		c.leases.add(name, secs, id, int64(l.Token), l.TTL, l.Sent, slots > 1)
		ok = true
		var got []*etcdserverpb.ResponseOp
		if slots <= 1 && len(reads) > 0 {
			got = resp.Responses[len(resp.Responses)-len(reads):]
		}
		return l, got, nil
	}
	cur, err := c.lockInfo(ctx, name, kvs, wait && opts.OnWait != nil)
	if err != nil {
		return nil, nil, err
	}
	cur.Limit = lim
	if !wait {
		// A limit that holds the lock back is said first, as the local
		// backend does: a frozen lock says frozen, with the reason, even
		// while its holders (every slot) hold it.
		if !lim.Allows(0) || slots > 1 && !lim.Allows(holders(kvs)) {
			return nil, nil, limitErr(name, lim, kvs)
		}
		return nil, nil, busy(cur, 0)
	}
	myRev := resp.Header.Revision // the revision of the transaction that put our key

	// Keep our place alive while the caller is told and while it waits.
	kctx, stopKeepAlive := context.WithCancel(ctx)
	lost := make(chan error, 1)
	kaDone := make(chan struct{})
	last := &ack{sent: sent, ttl: l.TTL}
	go func() {
		defer close(kaDone)
		if err := c.keepAlive(kctx, id, last); err != nil {
			lost <- err
		}
	}()
	if opts.OnWait != nil {
		opts.OnWait(cur)
	}
	wctx, cancel := ctx, context.CancelFunc(func() {})
	waitUntil := time.Now().Add(opts.Wait)
	if opts.Wait > 0 {
		wctx, cancel = context.WithDeadline(ctx, waitUntil)
	}
	// kvs are the lock's keys by create revision, ours included: the key
	// just ahead of ours is the last one created before it.
	var pred *mvccpb.KeyValue
	for _, kv := range kvs {
		if kv.CreateRevision < myRev {
			pred = kv
		}
	}
	claim := func() string {
		now = time.Now()
		return meta{Holder: holder, TTL: opts.TTL.String(), AcquiredAt: &now, Supervised: supervised}.encode()
	}
	heldBack := meta{Holder: holder, TTL: opts.TTL.String(), QueuedAt: &now, Supervised: supervised, HeldBack: true}.encode()
	var got []*etcdserverpb.ResponseOp // the answers of reads, read in our claim
	if slots > 1 {
		claimSlot := func(slot int) string {
			now = time.Now()
			return meta{Holder: holder, TTL: opts.TTL.String(), AcquiredAt: &now, Supervised: supervised, Slots: slots, Slot: slot}.encode()
		}
		l.Slot, err = c.waitSlot(wctx, name, key, id, myRev, slots, sem, lost, claimSlot)
	} else {
		got, err = c.waitTurn(wctx, lockRange, key, id, myRev, pred, lost, claim, limRev, lim, heldBack, reads)
	}
	cancel()
	stopKeepAlive()
	<-kaDone
	// Our lease ended before our turn: a new place at the end of the
	// queue (AcquireWith), within what is left of the wait. Whatever ended
	// it (a stall longer than its TTL; a leader that resumes from a stall
	// and revokes leases its successor kept alive, etcd#15247, while our
	// renewals were answered; a revoke by hand), the waiter never held
	// the lock, and its wait is what it asked for.
	requeue := &errRequeue{cur: cur, told: true}
	if err != nil {
		var le *coord.LimitError
		switch {
		case ctx.Err() != nil:
			return nil, nil, fmt.Errorf("waiting for lock %q: %w", name, ctx.Err())
		case errors.Is(err, errLeaseGone):
			return nil, nil, requeue
		case wctx.Err() != nil && errors.As(err, &le):
			return nil, nil, le
		case wctx.Err() != nil:
			return nil, nil, c.gaveUp(ctx, cur, slots, opts.Wait)
		}
		return nil, nil, err
	}

	// Our turn, claimed (acquired_at recorded at now). The caller's
	// safe-until counts from the send time of the last acknowledged
	// renewal (the grant, or the keep-alive's): when that is more than a
	// renewal interval old (the keep-alive failed of late), renew now.
	if time.Since(last.sent) >= last.ttl/3 {
		ttl, s, err := c.ka.renew(ctx, id)
		switch {
		case err != nil:
			return nil, nil, c.mapErr(ctx, "renew lease", err)
		case ttl <= 0:
			// The claim went through just before etcd, answering again
			// after a stall, revoked our expired lease (and the claimed
			// key with it): TestWholeClusterStall once saw the waiter
			// give up here.
			return nil, nil, requeue
		}
		last.sent, last.ttl = s, time.Duration(ttl)*time.Second
	}
	if l.Token, err = tokenOf(name, myRev); err != nil {
		return nil, nil, err
	}
	l.TTL = last.ttl
	l.Sent = last.sent
	l.AcquiredAt = now
	c.leases.add(name, secs, id, int64(l.Token), l.TTL, l.Sent, slots > 1)
	ok = true
	return l, got, nil
}

// claimTimeout bounds one attempt of a waiter's claim (see waitTurn).
const claimTimeout = time.Second

// requeueRetry is the pause between a waiter's attempts to take a place
// while the cluster does not answer them (see errRequeue).
const requeueRetry = 250 * time.Millisecond

// errLeaseGone: a waiter's lease ended before its turn.
var errLeaseGone = errors.New("lease gone")

// unanswered maps the error of a request that takes a place: for a
// waiter, one that no member answered (a stalled leader's "request timed
// out", no leader) is errRequeue, to try again.
func (c *Coordinator) unanswered(ctx context.Context, wait bool, name, op string, err error) error {
	if wait && !answered(err) && ctx.Err() == nil && !c.closed.Load() {
		return &errRequeue{cur: coord.LockInfo{Name: name}, pause: true}
	}
	return c.mapErr(ctx, op, err)
}

// gaveUp is the error of a waiter whose wait ended before its turn: a
// *coord.LimitError when a limit, read once more now (as the local backend
// looks once more), holds the lock back (frozen; a semaphore's holders at
// its limit), else busy.
func (c *Coordinator) gaveUp(ctx context.Context, cur coord.LockInfo, slots int, waited time.Duration) error {
	rctx, cancel := context.WithTimeout(ctx, claimTimeout)
	ls, err := c.Limits(rctx)
	cancel()
	n := len(cur.AllHolders())
	if lim := coord.EffectiveLimit(ls, cur.Name); err == nil && (!lim.Allows(0) || slots > 1 && !lim.Allows(n)) {
		return &coord.LimitError{Lock: cur.Name, Limit: *lim, Holders: n}
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

// waitTurn waits until no key of the lock has a create revision smaller
// than myRev, or until lost reports that our lease ended. As
// concurrency.Mutex does, it watches only the key just ahead of ours (pred,
// taken from the transaction that put ours at myRev), so a release wakes
// one waiter. When that key is gone, one transaction claims the lock if
// every key of the lock is ours or younger (recording acquired_at with the
// value claim returns), or else returns the key now just ahead of ours and
// whether ours is still there: one round trip per wake-up.
//
// The claim also compares the operator limits as read at limRev (0: none),
// and is not tried while lim, the limit then read, holds the lock back: the
// same reads are made without it. When no key is ahead of ours but a limit
// holds the lock back, it waits for the next change of a limit
// (waitLimits), and returns an error wrapping the *coord.LimitError when
// ctx ends meanwhile.
func (c *Coordinator) waitTurn(ctx context.Context, lockRange, key string, id clientv3.LeaseID, myRev int64, pred *mvccpb.KeyValue, lost <-chan error, claim func() string, limRev int64, lim *coord.Limit, heldBack string, extra []clientv3.Op) (got []*etcdserverpb.ResponseOp, err error) {
	name := lockName(key, c)
	marked := false // our key says held_back
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// Close ends the wait at once.
	defer context.AfterFunc(c.ctx, cancel)()
	defer func() {
		if err != nil && c.closed.Load() {
			err = errClosed
		}
	}()
	from := myRev + 1
	for {
		if pred != nil {
			if err := c.waitDelete(ctx, pred, from, lost); err != nil {
				return nil, err
			}
		}
		reads := []clientv3.Op{
			clientv3.OpGet(lockRange, append(clientv3.WithLastCreate(), clientv3.WithKeysOnly(), clientv3.WithMaxCreateRev(myRev-1))...),
			clientv3.OpGet(key, clientv3.WithCountOnly()),
			c.limitsGet(),
		}
		// One attempt is bounded, and tried again: a request that went to
		// a member that stopped answering must not hold the waiter (the
		// claim can be sent twice: the second finds the lock ours). While
		// a limit holds the lock back, only the reads are made.
		tctx, tcancel := context.WithTimeout(ctx, claimTimeout)
		var resp *clientv3.TxnResponse
		blocked := !lim.Allows(0)
		if blocked {
			resp, err = c.cli.Txn(tctx).Then(reads...).Commit()
		} else {
			resp, err = c.cli.Txn(tctx).
				If(clientv3.Compare(clientv3.CreateRevision(lockRange), ">", myRev-1).WithPrefix(),
					clientv3.Compare(clientv3.CreateRevision(key), "=", myRev),
					c.limitsCmp(limRev)).
				Then(append([]clientv3.Op{clientv3.OpPut(key, claim(), clientv3.WithLease(id))}, extra...)...).
				Else(reads...).
				Commit()
		}
		tcancel()
		switch {
		case err != nil && ctx.Err() == nil && tctx.Err() != nil:
			continue // timed out: again (pred stays: the watch sees it gone at once)
		case errors.Is(err, rpctypes.ErrLeaseNotFound):
			return nil, errLeaseGone
		case len(extra) > 0 && errors.Is(err, rpctypes.ErrPermissionDenied):
			extra = nil // the caller's reads (see AcquireWith): claim without them
			continue
		case err != nil:
			return nil, c.mapErr(ctx, "wait", err)
		case resp.Succeeded && !blocked:
			if len(extra) > 0 {
				got = resp.Responses[1:]
			}
			return got, nil
		case resp.Responses[1].GetResponseRange().Count == 0:
			return nil, errLeaseGone // our key is gone: the lease ended
		}
		kvs := resp.Responses[0].GetResponseRange().Kvs
		pred, from = nil, resp.Header.Revision+1
		limRev = resp.Header.Revision
		if lim, err = c.effectiveOf(name, resp.Responses[2].GetResponseRange().Kvs); err != nil {
			return nil, err
		}
		if len(kvs) > 0 {
			pred = kvs[0]
			continue
		}
		// First in line, and the claim failed on the limits.
		if lim.Allows(0) {
			continue // changed since they were read, and allow it now
		}
		if !marked {
			if err := c.markHeldBack(ctx, key, id, myRev, heldBack); err != nil {
				return nil, err
			}
			marked = true
		}
		if err := c.waitLimits(ctx, from, lost); err != nil {
			if ctx.Err() != nil {
				return nil, fmt.Errorf("%w (%w)", &coord.LimitError{Lock: name, Limit: *lim}, err)
			}
			return nil, err
		}
	}
}

// lockName is the name of the lock of one of its lease keys.
func lockName(key string, c *Coordinator) string {
	name, _ := c.parseKey(key)
	return name
}

// limitErr is the error of a try-lock refused by an operator limit.
func limitErr(name string, lim *coord.Limit, kvs []*mvccpb.KeyValue) error {
	if len(kvs) > 0 && decodeMeta(kvs[0].Value).Slots > 1 {
		return &coord.LimitError{Lock: name, Limit: *lim, Holders: holders(kvs)}
	}
	return &coord.LimitError{Lock: name, Limit: *lim, Holders: min(len(kvs), 1)}
}

// waitDelete returns nil when pred's key is deleted at revision from or
// later, or when its watch ends (compaction; the caller reads again); else
// ctx's error or the lease-lost error.
//
// etcd serves a watch that starts at a revision it has already reached
// from a catch-up loop that runs every 100ms, for that revision and every
// later one, until the watch has caught up: events come up to 100ms late.
// When revisions went by between the read that found the key and the
// watch's creation (often: the holder records acquired_at, or releases at
// once), a read tells whether the key is already gone, or was created again
// since (a Coordinator that acquires in a loop puts the same key on its
// kept lease: a key with another create revision is another holding, and
// pred's is gone); when it is not, the watch starts again after that read,
// so that it follows live events (a few times at most, then the catch-up
// is waited for).
func (c *Coordinator) waitDelete(ctx context.Context, pred *mvccpb.KeyValue, from int64, lost <-chan error) error {
	key := string(pred.Key)
	for restarts := 0; ; restarts++ {
		again, err := c.watchDelete(ctx, key, pred.CreateRevision, from, lost, restarts < 3)
		if err != nil || again == 0 {
			return err
		}
		from = again
	}
}

// watchDelete is one watch of waitDelete. It returns a revision to watch
// from again when restart allows and the watch would be served late.
//
// A watch that stops hearing goes deaf: the member that serves it may be
// frozen or cut off while the TCP connection stays open, and a release
// would be heard only when it comes back. So every watchCheck the waiter
// asks for a progress notification (etcd answers on the same stream); a
// watch that heard nothing for two of them is started again, from the same
// revision, on a new stream (a stream is per context key: each watch has
// its own), which the client's balancer puts on another member. The watch
// requires a leader: a member that lost it ends the watch.
func (c *Coordinator) watchDelete(ctx context.Context, key string, createRev, from int64, lost <-chan error, restart bool) (int64, error) {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	wctx = metadata.AppendToOutgoingContext(wctx, "fence-watch", strconv.FormatUint(watchSeq.Add(1), 10))
	// Deaf: read whether the key is still there (a read is hedged across
	// members), then watch again, elsewhere.
	deaf := func() (int64, error) {
		resp, err := c.cli.Get(ctx, key, clientv3.WithKeysOnly())
		switch {
		case err != nil:
			return from, nil
		case len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != createRev:
			return 0, nil
		default:
			return resp.Header.Revision + 1, nil
		}
	}
	// Watch returns once the member has created the watch: a frozen one
	// never does.
	wchc := make(chan clientv3.WatchChan, 1)
	go func() {
		wchc <- c.cli.Watch(wctx, key, clientv3.WithRev(from), clientv3.WithFilterPut(), clientv3.WithCreatedNotify())
	}()
	var wch clientv3.WatchChan
	created := time.NewTimer(2 * watchCheck)
	defer created.Stop()
	select {
	case wch = <-wchc:
	case err := <-lost:
		return 0, err
	case <-created.C:
		return deaf()
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	tick := time.NewTicker(watchCheck)
	defer tick.Stop()
	heard := time.Now()
	for {
		select {
		case err := <-lost:
			return 0, err
		case <-tick.C:
			if time.Since(heard) >= 2*watchCheck {
				return deaf()
			}
			go c.cli.RequestProgress(wctx)
			continue
		case wr, ok := <-wch:
			heard = time.Now()
			if ok && wr.IsProgressNotify() {
				continue
			}
			if !ok || wr.Err() != nil || wr.Canceled {
				if ctx.Err() == nil && !c.closed.Load() && (!ok || errors.Is(wr.Err(), rpctypes.ErrNoLeader)) {
					return from, nil // closed under us, or no leader: again, elsewhere
				}
				return 0, ctx.Err() // nil: compacted, cancelled or closed
			}
			if wr.Created && wr.Header.Revision >= from {
				resp, err := c.cli.Get(ctx, key, clientv3.WithKeysOnly())
				if err != nil {
					return 0, c.mapErr(ctx, "wait", err)
				}
				if len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != createRev {
					return 0, nil
				}
				if restart {
					return resp.Header.Revision + 1, nil
				}
			}
			for _, ev := range wr.Events {
				if ev.Type == mvccpb.DELETE {
					return 0, nil
				}
			}
		}
	}
}

// watchCheck is how often a waiter's watch asks for a progress
// notification (see watchDelete): a watch that heard nothing for two is
// moved, so a release is noticed within about a second of a member going
// silent.
const watchCheck = 400 * time.Millisecond

// watchSeq tells the waiters' watches apart (each gets a stream of its own).
var watchSeq atomic.Uint64

// keepAlive renews lease id every third of its TTL until ctx ends, and
// records each acknowledged renewal in last (read by Acquire once
// keepAlive has ended). It returns an error only when
// the lease is gone.
func (c *Coordinator) keepAlive(ctx context.Context, id clientv3.LeaseID, last *ack) error {
	t := time.NewTicker(max(last.ttl/3, 100*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		rctx, cancel := context.WithTimeout(ctx, max(last.ttl/3, 100*time.Millisecond))
		ttl, sent, err := c.ka.renew(rctx, id)
		cancel()
		switch {
		case err == nil && ttl <= 0:
			return errLeaseGone
		case err == nil:
			last.sent, last.ttl = sent, time.Duration(ttl)*time.Second
		}
		// Other errors: the cluster is unreachable for now; the next tick
		// tries again, and a lease that ran out is reported then.
	}
}

// revoke revokes a lease on a fresh context, for cleanups after the
// caller's context may have ended. Errors are ignored: the lease then ends
// at its TTL.
func (c *Coordinator) revoke(id clientv3.LeaseID) {
	if c.closed.Load() && c.owned {
		return // the client is closed too; the lease runs out at its TTL
	}
	c.revokeNow(id)
}

func (c *Coordinator) revokeNow(id clientv3.LeaseID) {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	_, _ = c.cli.Revoke(ctx, id)
}
