package etcd

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/metadata"

	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/internal/coordkit"
)

// waiter is a queued attempt waiting for its turn: its key was put at
// myRev, and st is the lock as last read.
type waiter struct {
	*attempt
	myRev  int64
	st     lockState
	lost   <-chan error // our lease ended
	marked bool         // our key says held_back
}

// waitStep is where a waiter goes from the lock as read.
type waitStep int

const (
	waitClaim    waitStep = iota // its turn: claim the lock (a semaphore's free slot)
	waitPred                     // a key ahead of ours goes first: watch it
	waitRange                    // a semaphore's waiter behind holders only: watch their deletions (and the limits)
	waitHeldBack                 // a lock's first waiter held back by a limit: mark our key, watch the limits
)

// afterRead decides a waiter's step: may (every key ahead holds and fewer
// than the slots and the limit allow; for a lock, none is ahead and the
// limit allows one), free (a slot is free; always for a lock), pred (a key
// is ahead of ours), predHolds (that key holds).
func afterRead(may, free, pred, predHolds, semaphore bool) waitStep {
	switch {
	case may && free:
		return waitClaim
	case pred && (!semaphore || !predHolds):
		return waitPred
	case semaphore:
		return waitRange
	}
	return waitHeldBack
}

// txnStep is where a waiter goes after one of its transactions.
type txnStep int

const (
	txnAgain  txnStep = iota // no answer in time: send it again (it can be sent twice)
	txnDone                  // its Then committed
	txnGone                  // our lease, or our key, is gone
	txnFailed                // the cluster refused the request
	txnRead                  // the lock was read again: decide again
)

// afterTxn decides a transaction's answer: again (unanswered, to try
// again), leaseGone, failed (another error), committed, keyGone (our key
// is no longer on the lock).
func afterTxn(again, leaseGone, failed, committed, keyGone bool) txnStep {
	switch {
	case again:
		return txnAgain
	case leaseGone:
		return txnGone
	case failed:
		return txnFailed
	case committed:
		return txnDone
	case keyGone:
		return txnGone
	}
	return txnRead
}

// wait waits until the waiter holds (a semaphore: see the top of slots.go)
// and returns its slot, or until w.lost reports that our lease ended. As
// concurrency.Mutex does, a lock's waiter watches only the key just ahead
// of its own, so a release wakes one waiter; when that key is gone, one
// transaction claims the lock if every key of the lock is ours or younger
// (recording acquired_at), or else reads the key now just ahead of ours:
// one round trip per wake-up. A semaphore's waiter reads the lock after
// its watch, then claims a free slot (keys ahead need no compare once
// read).
//
// Every claim also compares the operator limits as last read, and is not
// tried while they hold the lock back: a lock's first waiter held back
// marks its key held_back and waits for the next change of a limit. When
// ctx ends while a limit holds the lock back, the error wraps the
// *coordkit.LimitError.
func (w *waiter) wait(ctx context.Context) (int, error) {
	gone := false // a lock's key ahead is gone, or its watch lost track: the claim's compare tells
	for {
		may, pred := eligible(w.st, w.myRev, w.slots)
		slot, cmp, free := w.slotFor()
		step := afterRead(may || gone, free, pred != nil, pred != nil && decodeMeta(pred.Value).AcquiredAt != nil, w.semaphore())
		gone = false
		var err error
		if step == waitClaim {
			var ok bool
			if ok, err = w.txn(ctx, []clientv3.Cmp{cmp, w.c.limitsCmp(w.st.rev)}, w.claimOps(slot)...); ok {
				return slot, nil
			}
		} else if err = w.await(ctx, step, pred); err != nil {
			if lim := w.st.lim; ctx.Err() != nil && lim != nil && (step == waitHeldBack || w.semaphore() && !may) {
				err = fmt.Errorf("%w (%w)", &coordkit.LimitError{Lock: w.name, Limit: *lim, Holders: holders(w.st.kvs)}, err)
			}
		} else if gone = step == waitPred && !w.semaphore() && coordkit.Allows(w.st.lim, 0); !gone {
			_, err = w.txn(ctx, nil)
		}
		if err != nil {
			return 0, err
		}
	}
}

// slotFor is the slot a claim takes and its compare: a semaphore's lowest
// free slot (free false: none), a lock's 0 with the compare that no key of
// the lock is older than ours.
func (w *waiter) slotFor() (int, clientv3.Cmp, bool) {
	if w.semaphore() {
		return w.c.slotChoice(w.name, w.slots, w.st.kvs, w.st.slotKVs)
	}
	return 0, clientv3.Compare(clientv3.CreateRevision(w.c.lockRange(w.name)), ">", w.myRev-1).WithPrefix(), true
}

// await is a waiter's watch before it reads (or claims) again: the key
// ahead (its deletion for a lock, any change for a semaphore), a
// semaphore's holders' deletions (and the limits, under one), or, for a
// lock's first waiter held back, the limits, once its key says held_back.
func (w *waiter) await(ctx context.Context, step waitStep, pred *mvccpb.KeyValue) error {
	spec := watchSpec{kv: pred, deletes: !w.semaphore()}
	switch step {
	case waitRange:
		spec = watchSpec{rng: w.c.lockRange(w.name), deletes: true, limits: w.st.lim != nil}
	case waitHeldBack:
		if !w.marked {
			// So that readers and watchers do not take it for the holder.
			if _, err := w.txn(ctx, nil, w.queuedOp(true)); err != nil {
				return err
			}
			w.marked = true
		}
		spec = watchSpec{rng: w.c.limitsRange()}
	}
	return w.c.watchChange(ctx, spec, w.st.rev+1, w.lost)
}

// txn is one transaction of the waiter, each attempt bounded by
// claimTimeout and sent again while unanswered: a request that went to a
// member that stopped answering must not hold the waiter (a claim sent
// twice finds the lock ours). With then, it runs then if our key is still
// ours and cmps hold; else, and when they do not, it reads the lock's keys
// ahead of ours into w.st. ok tells that then committed; errLeaseGone that
// our lease, or our key, is gone.
func (w *waiter) txn(ctx context.Context, cmps []clientv3.Cmp, then ...clientv3.Op) (ok bool, err error) {
	opts := []clientv3.OpOption{clientv3.WithPrefix(), byCreate, clientv3.WithMaxCreateRev(w.myRev - 1)}
	if !w.semaphore() {
		opts = append(opts, clientv3.WithLastCreate()...) // a lock's waiter needs the key just ahead only
	}
	reads := append([]clientv3.Op{clientv3.OpGet(w.key, clientv3.WithCountOnly())}, w.c.stateReads(w.name, w.semaphore(), opts...)...)
	for {
		tctx, cancel := context.WithTimeout(ctx, claimTimeout)
		txn := w.c.cli.Txn(tctx)
		if len(then) > 0 {
			own := clientv3.Compare(clientv3.CreateRevision(w.key), "=", w.myRev)
			txn = txn.If(append(cmps, own)...).Then(then...).Else(reads...)
		} else {
			txn = txn.Then(reads...)
		}
		resp, err := txn.Commit()
		again := err != nil && retryable(ctx, tctx, err)
		cancel()
		committed := err == nil && resp.Succeeded && len(then) > 0
		keyGone := err == nil && !committed && resp.Responses[0].GetResponseRange().Count == 0
		switch afterTxn(again, errors.Is(err, rpctypes.ErrLeaseNotFound), err != nil, committed, keyGone) {
		case txnAgain:
			continue
		case txnGone:
			return false, errLeaseGone
		case txnFailed:
			return false, w.c.mapErr(ctx, "wait", err)
		case txnDone:
			return true, nil
		}
		w.st, err = w.c.parseState(w.name, resp, w.semaphore())
		return false, err
	}
}

// retryable tells a request of a waiter to try again: its attempt's
// context (tctx) timed out, or no member answered it (a stalled leader's
// "request timed out", no leader), while the caller's ctx goes on.
func retryable(ctx, tctx context.Context, err error) bool {
	return ctx.Err() == nil && (tctx.Err() != nil || !answered(err))
}

// limitErr is the error of a try-lock refused by an operator limit.
func limitErr(name string, lim *coord.Limit, kvs []*mvccpb.KeyValue) error {
	if len(kvs) > 0 && decodeMeta(kvs[0].Value).Slots > 1 {
		return &coordkit.LimitError{Lock: name, Limit: *lim, Holders: holders(kvs)}
	}
	return &coordkit.LimitError{Lock: name, Limit: *lim, Holders: min(len(kvs), 1)}
}

// watchSpec is what a waiter's watch follows: one key as read (kv), or every
// key under rng; deletions only (deletes); and, with limits, the limits too.
type watchSpec struct {
	kv      *mvccpb.KeyValue
	rng     string
	deletes bool
	limits  bool
}

// watchChange returns nil at the first event of what w names at revision
// from or later, or when its watch ends or goes deaf (compaction, a frozen
// member: the caller reads again); else ctx's error or the lease-lost
// error.
//
// etcd serves a watch that starts at a revision it has already reached
// from a catch-up loop that runs every 100ms, for that revision and every
// later one, until the watch has caught up: events come up to 100ms late.
// When revisions went by between the read that found w.kv and the watch's
// creation (often: the holder records acquired_at, or releases at once),
// a read tells whether the key is already gone or changed (a key with
// another create revision is another holding, and the one read is gone);
// when it is not, the watch starts again after that read, so that it
// follows live events (a few times at most, then the catch-up is waited
// for).
func (c *coordinator) watchChange(ctx context.Context, w watchSpec, from int64, lost <-chan error) error {
	for restarts := 0; ; restarts++ {
		again, err := c.watchOnce(ctx, w, from, lost, restarts < 3)
		if err != nil || again == 0 {
			return err
		}
		from = again
	}
}

// watchStep is what a watch response means to a waiter's watch.
type watchStep int

const (
	watchOn      watchStep = iota // nothing of note: keep watching
	watchDeleted                  // the event watched for came
	watchAgain                    // closed under us, or no leader: watch again, elsewhere
	watchEnded                    // compacted, cancelled or closed: the caller reads again
	watchLate                     // created after from: read whether the key is still there
)

// watchNews is what a watch response says.
type watchNews struct {
	closed   bool // the channel is closed
	progress bool // a progress notification
	failed   bool // an error, or cancelled
	noLeader bool // the error is "no leader"
	alive    bool // the caller's context and the coordinator go on
	late     bool // the creation, at a revision after the watch's start
	deleted  bool // an event watched for: a deletion, with deletes; any, else
}

func newsOf(wr clientv3.WatchResponse, ok bool, from int64, deletes, alive bool) watchNews {
	return watchNews{closed: !ok, progress: ok && wr.IsProgressNotify(), failed: wr.Err() != nil || wr.Canceled,
		noLeader: errors.Is(wr.Err(), rpctypes.ErrNoLeader), alive: alive,
		late: wr.Created && wr.Header.Revision >= from, deleted: hasDelete(wr.Events) || !deletes && len(wr.Events) > 0}
}

func hasDelete(evs []*clientv3.Event) bool {
	for _, ev := range evs {
		if ev.Type == mvccpb.DELETE {
			return true
		}
	}
	return false
}

// afterWatch decides what a watch response leads to.
func afterWatch(n watchNews) watchStep {
	switch {
	case n.progress:
		return watchOn
	case (n.closed || n.failed) && n.alive && (n.closed || n.noLeader):
		return watchAgain
	case n.closed || n.failed:
		return watchEnded
	case n.late:
		return watchLate
	case n.deleted:
		return watchDeleted
	}
	return watchOn
}

// watchOnce is one watch of watchChange. It returns a revision to watch
// from again when restart allows and the watch would be served late, or
// when it ended under a caller that goes on.
//
// A watch that stops hearing goes deaf: the member that serves it may be
// frozen or cut off while the TCP connection stays open, and a release
// would be heard only when it comes back. So every watchCheck the waiter
// asks for a progress notification (etcd answers on the same stream); a
// watch that is not created, or heard nothing, for two of them ends: the
// caller reads again (its claim is bounded and tried again) and watches
// again on a new stream (a stream is per context key: each watch has its
// own), which the client's balancer puts on another member. The watch
// requires a leader: a member that lost it ends the watch.
func (c *coordinator) watchOnce(ctx context.Context, w watchSpec, from int64, lost <-chan error, restart bool) (int64, error) {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	wctx = metadata.AppendToOutgoingContext(wctx, "fence-watch", strconv.FormatUint(watchSeq.Add(1), 10))
	wchc, lchc := c.openWatch(wctx, w, from)
	var wch, lch clientv3.WatchChan
	tick := time.NewTicker(watchCheck)
	defer tick.Stop()
	heard := time.Now()
	for {
		select {
		case wch = <-wchc:
		case lch = <-lchc:
		case err := <-lost:
			return 0, err
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-tick.C:
			if time.Since(heard) >= 2*watchCheck {
				return 0, nil // deaf
			}
			go c.cli.RequestProgress(wctx)
		case wr, ok := <-lch:
			if !ok || wr.Err() != nil || wr.Canceled || len(wr.Events) > 0 {
				return 0, ctx.Err()
			}
		case wr, ok := <-wch:
			heard = time.Now()
			switch afterWatch(newsOf(wr, ok, from, w.deletes, ctx.Err() == nil && !c.closed.Load())) {
			case watchAgain:
				return from, nil
			case watchEnded:
				return 0, ctx.Err() // nil: the caller reads again
			case watchDeleted:
				return 0, nil
			case watchLate:
				if again, done, err := c.stillThere(ctx, w.kv, restart); done {
					return again, err
				}
			}
		}
	}
}

// openWatch starts the watch of w from revision from (and, with
// w.limits, the limits') on goroutines of their own. Watch returns once
// the member has created the watch: a frozen one never does (watchOnce's
// ticker gives up on it).
func (c *coordinator) openWatch(wctx context.Context, w watchSpec, from int64) (wchc, lchc chan clientv3.WatchChan) {
	key, opts := w.rng, []clientv3.OpOption{clientv3.WithRev(from), clientv3.WithCreatedNotify(), clientv3.WithPrefix()}
	if w.kv != nil {
		key, opts = string(w.kv.Key), opts[:2]
	}
	if w.deletes {
		opts = append(opts, clientv3.WithFilterPut())
	}
	wchc, lchc = make(chan clientv3.WatchChan, 1), make(chan clientv3.WatchChan, 1)
	go func() { wchc <- c.cli.Watch(wctx, key, opts...) }()
	if w.limits {
		go func() { lchc <- c.cli.Watch(wctx, c.limitsRange(), clientv3.WithPrefix(), clientv3.WithRev(from)) }()
	}
	return wchc, lchc
}

// stillThere reads, after a watch was created late, whether kv's key is
// still there as read: done with 0 when it is gone or changed, with the
// revision to watch from again when restart allows, else not done (the
// watch goes on; also when kv is nil: the caller read many keys, and the
// catch-up is waited for).
func (c *coordinator) stillThere(ctx context.Context, kv *mvccpb.KeyValue, restart bool) (int64, bool, error) {
	if kv == nil {
		return 0, false, nil
	}
	resp, err := c.cli.Get(ctx, string(kv.Key), clientv3.WithKeysOnly())
	switch {
	case err != nil:
		return 0, true, c.mapErr(ctx, "wait", err)
	case len(resp.Kvs) == 0 || resp.Kvs[0].ModRevision != kv.ModRevision:
		return 0, true, nil
	case restart:
		return resp.Header.Revision + 1, true, nil
	}
	return 0, false, nil
}

// watchCheck is how often a waiter's watch asks for a progress
// notification (see watchOnce): a watch that heard nothing for two is
// moved, so a release is noticed within about a second of a member going
// silent.
const watchCheck = 400 * time.Millisecond

// watchSeq tells the waiters' watches apart (each gets a stream of its own).
var watchSeq atomic.Uint64

// keepAlive renews lease id every third of its TTL until ctx ends, and
// records each acknowledged renewal in last (read by Acquire once
// keepAlive has ended). It returns an error only when
// the lease is gone.
func (c *coordinator) keepAlive(ctx context.Context, id clientv3.LeaseID, last *ack) error {
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
func (c *coordinator) revoke(id clientv3.LeaseID) {
	if c.closed.Load() && c.owned {
		return // the client is closed too; the lease runs out at its TTL
	}
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	_ = c.revokeBounded(ctx, id)
}
