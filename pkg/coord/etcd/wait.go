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

// turn is a lock's waiter in line, as waitTurn knows it.
type turn struct {
	name, lockRange, key string
	id                   clientv3.LeaseID
	myRev                int64            // the create revision of our key
	pred                 *mvccpb.KeyValue // the key just ahead of ours (nil: none)
	from                 int64            // the revision to watch pred from
	limRev               int64            // the revision the limits were read at (0: none)
	lim                  *coord.Limit     // the limit then read
	lost                 <-chan error     // our lease ended
	claim                func() string    // our key's value once we hold
	heldBack             string           // our key's value while a limit holds the lock back
	marked               bool             // our key says held_back
}

// turnStep is where a waiter goes after one claim attempt.
type turnStep int

const (
	turnAgain    turnStep = iota // the attempt went unanswered, or the limits allow now: claim again
	turnMine                     // claimed: the waiter holds the lock
	turnGone                     // our lease, or our key, is gone
	turnFailed                   // the cluster refused the request
	turnWatch                    // a key is ahead of ours: wait for its deletion
	turnHeldBack                 // first in line, but a limit holds the lock back: wait for the limits
)

// claimAnswer is what one claim attempt learnt.
type claimAnswer struct {
	unanswered bool // no answer within claimTimeout, or none of the cluster's own
	leaseGone  bool // etcd no longer knows our lease
	failed     bool // any other error
	claimed    bool // the claim committed
	keyGone    bool // our key is no longer on the lock
	ahead      bool // a key is ahead of ours
	allows     bool // the limit as read lets the lock be held
}

// afterClaim decides the next step from a claim attempt's answer.
func afterClaim(a claimAnswer) turnStep {
	switch {
	case a.unanswered:
		return turnAgain
	case a.leaseGone:
		return turnGone
	case a.failed:
		return turnFailed
	case a.claimed:
		return turnMine
	case a.keyGone:
		return turnGone
	case a.ahead:
		return turnWatch
	case a.allows:
		return turnAgain // the limits changed since they were read, and allow it now
	}
	return turnHeldBack
}

// waitTurn waits until no key of the lock has a create revision smaller
// than t.myRev, or until t.lost reports that our lease ended. As
// concurrency.Mutex does, it watches only the key just ahead of ours
// (t.pred), so a release wakes one waiter. When that key is gone, one
// transaction claims the lock if every key of the lock is ours or younger
// (recording acquired_at), or else returns the key now just ahead of ours
// and whether ours is still there: one round trip per wake-up.
//
// The claim also compares the operator limits as read at t.limRev, and is
// not tried while t.lim holds the lock back: the same reads are made
// without it. When no key is ahead of ours but a limit holds the lock
// back, it waits for the next change of a limit, and returns
// an error wrapping the *coordkit.LimitError when ctx ends meanwhile.
func (c *coordinator) waitTurn(ctx context.Context, t *turn) error {
	for {
		if t.pred != nil {
			if err := c.watchChange(ctx, watchSpec{kv: t.pred, deletes: true}, t.from, t.lost); err != nil {
				return err
			}
		}
		ans, err := c.tryTurn(ctx, t)
		switch afterClaim(ans) {
		case turnMine:
			return nil
		case turnGone:
			return errLeaseGone
		case turnFailed:
			return c.mapErr(ctx, "wait", err)
		case turnHeldBack:
			if err := c.holdBack(ctx, t); err != nil {
				return err
			}
		}
	}
}

// tryTurn is one claim attempt, bounded and tried again by the caller: a
// request that went to a member that stopped answering must not hold the
// waiter (the claim can be sent twice: the second finds the lock ours).
// While a limit holds the lock back, only the reads are made. It updates
// t from the reads.
func (c *coordinator) tryTurn(ctx context.Context, t *turn) (claimAnswer, error) {
	reads := []clientv3.Op{
		clientv3.OpGet(t.lockRange, append(clientv3.WithLastCreate(), clientv3.WithKeysOnly(), clientv3.WithMaxCreateRev(t.myRev-1))...),
		clientv3.OpGet(t.key, clientv3.WithCountOnly()),
		c.limitsGet(),
	}
	tctx, cancel := context.WithTimeout(ctx, claimTimeout)
	defer cancel()
	blocked := !coordkit.Allows(t.lim, 0)
	txn := c.cli.Txn(tctx)
	if !blocked {
		txn = txn.If(clientv3.Compare(clientv3.CreateRevision(t.lockRange), ">", t.myRev-1).WithPrefix(),
			clientv3.Compare(clientv3.CreateRevision(t.key), "=", t.myRev),
			c.limitsCmp(t.limRev)).
			Then(clientv3.OpPut(t.key, t.claim(), clientv3.WithLease(t.id))).
			Else(reads...)
	} else {
		txn = txn.Then(reads...)
	}
	resp, err := txn.Commit()
	if err != nil {
		return claimAnswer{unanswered: retryable(ctx, tctx, err), leaseGone: errors.Is(err, rpctypes.ErrLeaseNotFound), failed: true}, err
	}
	if resp.Succeeded && !blocked {
		return claimAnswer{claimed: true}, nil
	}
	if resp.Responses[1].GetResponseRange().Count == 0 {
		return claimAnswer{keyGone: true}, nil
	}
	kvs := resp.Responses[0].GetResponseRange().Kvs
	t.pred, t.from, t.limRev = nil, resp.Header.Revision+1, resp.Header.Revision
	if t.lim, err = c.effectiveOf(t.name, resp.Responses[2].GetResponseRange().Kvs); err != nil {
		return claimAnswer{failed: true}, err
	}
	if len(kvs) > 0 {
		t.pred = kvs[0]
	}
	return claimAnswer{ahead: t.pred != nil, allows: coordkit.Allows(t.lim, 0)}, nil
}

// retryable tells a request of a waiter to try again: its attempt's
// context (tctx) timed out, or no member answered it (a stalled leader's
// "request timed out", no leader), while the caller's ctx goes on.
func retryable(ctx, tctx context.Context, err error) bool {
	return ctx.Err() == nil && (tctx.Err() != nil || !answered(err))
}

// holdBack is the first waiter's wait while a limit holds the lock back:
// its key says held_back, and it waits for a change of the limits.
func (c *coordinator) holdBack(ctx context.Context, t *turn) error {
	if !t.marked {
		if err := c.markHeldBack(ctx, t.key, t.id, t.myRev, t.heldBack); err != nil {
			return err
		}
		t.marked = true
	}
	if err := c.watchChange(ctx, watchSpec{rng: c.limitsRange()}, t.from, t.lost); err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("%w (%w)", &coordkit.LimitError{Lock: t.name, Limit: *t.lim}, err)
		}
		return err
	}
	return nil
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
	_, _ = c.cli.Revoke(ctx, id)
}
