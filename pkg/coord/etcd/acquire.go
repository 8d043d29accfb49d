package etcd

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fence-dev/fence/pkg/coord"
)

// Acquire takes a lease on name: it grants an etcd lease, puts its key on
// the lock and, when the lock is held and opts.Wait allows, waits for its
// turn. Lease.Sent is the send time of the grant, or of a renewal made right
// after the wait. A failed or cancelled Acquire revokes its lease, which
// removes its place in the queue.
func (c *Coordinator) Acquire(ctx context.Context, name string, opts coord.AcquireOptions) (*coord.Lease, error) {
	if err := coord.ValidateName(name); err != nil {
		return nil, err
	}
	if err := coord.ValidateTTL(opts.TTL); err != nil {
		return nil, err
	}
	if err := c.check(); err != nil {
		return nil, err
	}
	holder := opts.Holder
	if holder == "" {
		holder = coord.DefaultHolder()
	}
	wait := opts.Wait != 0

	secs := int64((opts.TTL + time.Second - 1) / time.Second)
	sent := time.Now()
	g, err := c.cli.Grant(ctx, secs)
	if err != nil {
		return nil, c.mapErr(ctx, "grant lease", err)
	}
	id := g.ID
	l := &coord.Lease{Name: name, Holder: holder, ID: formatID(id), TTL: time.Duration(g.TTL) * time.Second, Sent: sent}
	ok := false
	defer func() {
		if !ok {
			c.revoke(id)
		}
	}()

	// One transaction: when no key is on the lock, ours is the holder;
	// otherwise it queues (or, not waiting, nothing is written) and the
	// lock's keys come back to find the holder.
	key := c.leaseKey(name, id)
	lockRange := c.lockRange(name)
	now := time.Now()
	held := meta{Holder: holder, TTL: opts.TTL.String(), AcquiredAt: &now}
	queued := meta{Holder: holder, TTL: opts.TTL.String(), QueuedAt: &now}
	els := []clientv3.Op{clientv3.OpGet(lockRange, clientv3.WithPrefix(), byCreate)}
	if wait {
		els = []clientv3.Op{
			clientv3.OpPut(key, queued.encode(), clientv3.WithLease(id)),
			clientv3.OpGet(lockRange, clientv3.WithPrefix(), byCreate),
		}
	}
	resp, err := c.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(lockRange), "=", 0).WithPrefix()).
		Then(clientv3.OpPut(key, held.encode(), clientv3.WithLease(id))).
		Else(els...).
		Commit()
	if err != nil {
		return nil, c.mapErr(ctx, "acquire", err)
	}
	if resp.Succeeded {
		l.Token = uint64(resp.Header.Revision)
		l.AcquiredAt = now
		ok = true
		return l, nil
	}
	kvs := resp.Responses[len(resp.Responses)-1].GetResponseRange().Kvs
	cur, err := c.lockInfo(ctx, name, kvs, wait && opts.OnWait != nil)
	if err != nil {
		return nil, err
	}
	if !wait {
		return nil, busy(cur, 0)
	}
	myRev := resp.Header.Revision // the revision of the transaction that put our key

	// Keep our place alive while the caller is told and while it waits.
	kctx, stopKeepAlive := context.WithCancel(ctx)
	lost := make(chan error, 1)
	kaDone := make(chan struct{})
	go func() {
		defer close(kaDone)
		if err := c.keepAlive(kctx, id, l.TTL); err != nil {
			lost <- err
		}
	}()
	if opts.OnWait != nil {
		opts.OnWait(cur)
	}
	wctx, cancel := ctx, context.CancelFunc(func() {})
	if opts.Wait > 0 {
		wctx, cancel = context.WithTimeout(ctx, opts.Wait)
	}
	// kvs are the lock's keys by create revision, ours included: the key
	// just ahead of ours is the last one created before it.
	var pred string
	for _, kv := range kvs {
		if kv.CreateRevision < myRev {
			pred = string(kv.Key)
		}
	}
	err = c.waitTurn(wctx, lockRange, myRev, pred, lost)
	cancel()
	stopKeepAlive()
	<-kaDone
	if err != nil {
		switch {
		case errors.Is(err, errLeaseGone):
			return nil, waiterLost(name)
		case ctx.Err() != nil:
			return nil, fmt.Errorf("waiting for lock %q: %w", name, ctx.Err())
		case wctx.Err() != nil:
			return nil, busy(cur, opts.Wait)
		}
		return nil, err
	}

	// Our turn. Renew once so that the caller gets a full TTL from now, and
	// record acquired_at, which also checks that our key is still there.
	sent = time.Now()
	ka, err := c.cli.KeepAliveOnce(ctx, id)
	if err != nil {
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			return nil, waiterLost(name)
		}
		return nil, c.mapErr(ctx, "renew lease", err)
	}
	now = time.Now()
	held = meta{Holder: holder, TTL: opts.TTL.String(), AcquiredAt: &now}
	up, err := c.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", myRev)).
		Then(clientv3.OpPut(key, held.encode(), clientv3.WithLease(id))).
		Commit()
	switch {
	case errors.Is(err, rpctypes.ErrLeaseNotFound) || (err == nil && !up.Succeeded):
		return nil, waiterLost(name)
	case err != nil:
		return nil, c.mapErr(ctx, "acquire", err)
	}
	l.Token = uint64(myRev)
	l.TTL = time.Duration(ka.TTL) * time.Second
	l.Sent = sent
	l.AcquiredAt = now
	ok = true
	return l, nil
}

// errLeaseGone: a waiter's lease ended before its turn.
var errLeaseGone = errors.New("lease gone")

// waiterLost explains a waiter whose lease ended before its turn: its
// renewals failed for a whole TTL, or someone revoked it. The caller never
// held the lock, so this is not ErrLeaseLost.
func waiterLost(name string) error {
	return fmt.Errorf("%w: the waiting lease on %q ended before its turn (renewals failed, or it was revoked)", coord.ErrUnavailable, name)
}

// busy is ErrBusy naming the holder.
func busy(cur coord.LockInfo, waited time.Duration) error {
	after := ""
	if waited > 0 {
		after = fmt.Sprintf(" (gave up after %v)", waited)
	}
	return fmt.Errorf("%w: lock %q is held by %s (token %d)%s", coord.ErrBusy, cur.Name, cur.Holder, cur.Token, after)
}

// waitTurn waits until no key of the lock has a create revision smaller
// than myRev, or until lost reports that our lease ended. As
// concurrency.Mutex does, it watches only the key just ahead of ours (pred,
// taken from the transaction that put ours at myRev), so a release wakes
// one waiter, and reads again what is ahead when that key is gone.
func (c *Coordinator) waitTurn(ctx context.Context, lockRange string, myRev int64, pred string, lost <-chan error) (err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// Close ends the wait at once.
	defer context.AfterFunc(c.cli.Ctx(), cancel)()
	defer func() {
		if err != nil && c.closed.Load() {
			err = errClosed
		}
	}()
	from := myRev + 1
	for {
		if err := c.waitDelete(ctx, pred, from, lost); err != nil {
			return err
		}
		resp, err := c.cli.Get(ctx, lockRange, append(clientv3.WithLastCreate(), clientv3.WithKeysOnly(), clientv3.WithMaxCreateRev(myRev-1))...)
		if err != nil {
			return c.mapErr(ctx, "wait", err)
		}
		if len(resp.Kvs) == 0 {
			return nil
		}
		pred, from = string(resp.Kvs[0].Key), resp.Header.Revision+1
	}
}

// waitDelete returns nil when key is deleted at revision from or later, or
// when its watch ends (compaction; the caller reads again); else ctx's
// error or the lease-lost error.
//
// etcd serves a watch that starts at a past revision from a catch-up loop
// that runs every 100ms. When revisions went by between the read that
// found key and the watch's creation (often: a holder that releases at
// once), a read tells at once whether key is already gone.
func (c *Coordinator) waitDelete(ctx context.Context, key string, from int64, lost <-chan error) error {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wch := c.cli.Watch(wctx, key, clientv3.WithRev(from), clientv3.WithFilterPut(), clientv3.WithCreatedNotify())
	for {
		select {
		case err := <-lost:
			return err
		case wr, ok := <-wch:
			if !ok || wr.Err() != nil || wr.Canceled {
				return ctx.Err() // nil: compacted, cancelled or closed
			}
			if wr.Created && wr.Header.Revision >= from {
				resp, err := c.cli.Get(ctx, key, clientv3.WithCountOnly())
				if err != nil {
					return c.mapErr(ctx, "wait", err)
				}
				if resp.Count == 0 {
					return nil
				}
			}
			for _, ev := range wr.Events {
				if ev.Type == mvccpb.DELETE {
					return nil
				}
			}
		}
	}
}

// keepAlive renews lease id every ttl/3 until ctx ends. It returns an error
// only when the lease is gone.
func (c *Coordinator) keepAlive(ctx context.Context, id clientv3.LeaseID, ttl time.Duration) error {
	t := time.NewTicker(max(ttl/3, 100*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if _, err := c.cli.KeepAliveOnce(ctx, id); errors.Is(err, rpctypes.ErrLeaseNotFound) {
			return errLeaseGone
		}
		// Other errors: the cluster is unreachable for now; the next tick
		// tries again, and a lease that ran out is reported then.
	}
}

// revoke revokes a lease on a fresh context, for cleanups after the
// caller's context may have ended. Errors are ignored: the lease then ends
// at its TTL.
func (c *Coordinator) revoke(id clientv3.LeaseID) {
	if c.closed.Load() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	_, _ = c.cli.Revoke(ctx, id)
}
