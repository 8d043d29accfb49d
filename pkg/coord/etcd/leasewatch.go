package etcd

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fence-dev/fence/pkg/coord"
)

// WatchLease implements coord.Coordinator with one etcd watch on the
// lease's key on lock name (that key only: no other lock's key, whatever its
// name, is in the range). For a lease that this coordinator put on the lock
// (and has not released), the watch starts from the key's creation, the
// lease's token: every change of the key since is in it, and no read comes
// first (one round trip less on a run's way to its command). For any other
// lease it reads the key first, then watches its deletion from that revision
// on. Either way a deletion before the watch began is not missed. The hold
// has certainly ended, and the channel gets an error
// wrapping coord.ErrLeaseLost, when
//
//   - the watch delivers the deletion of the key (the lease revoked or
//     expired, or the key deleted by someone else), or
//   - a read finds the key gone and etcd says the lease no longer exists.
//
// A stop request (RequestStop) is a put of the same key with
// stop_requested_at in its value: the watch (or the first read, for an ask
// that came before it) reports it with an error wrapping
// coord.ErrStopRequested. So one watch per run serves both.
//
// A watch that fails (etcd unreachable, no leader) is opened again from the
// last revision seen; the client also resumes it by itself across
// reconnections. A watch cancelled because its revision was compacted
// reads the key again: still there (the same key, the same create
// revision), the watch goes on from the read; gone with the lease gone, the
// hold has ended. Any other finding (the key gone while its lease lives, the
// key put again) ends the watch without a report: it is not a revocation
// that can be told for certain, and renewals go on as before.
func (c *coordinator) WatchLease(ctx context.Context, name, leaseID string) (<-chan error, error) {
	id, err := c.checkLease(name, leaseID)
	if err != nil {
		return nil, err
	}
	w := &leaseWatch{c: c, name: name, id: id, key: c.leaseKey(name, id)}
	create, _ := c.leases.owned(name, id) // 0: read the key first
	return w.start(c.bound(ctx), create, create), nil
}

// leaseWatch follows one lease's key.
type leaseWatch struct {
	c    *coordinator
	name string
	id   clientv3.LeaseID
	key  string
	// looked, when set (tests), is called after every read of the key.
	looked func()
}

// Back-off between attempts after a failed read or watch.
const (
	leaseWatchMinBackoff = 100 * time.Millisecond
	leaseWatchMaxBackoff = 5 * time.Second
)

// start runs the watch on a goroutine of its own (see run).
func (w *leaseWatch) start(ctx context.Context, create, rev int64) <-chan error {
	ch := make(chan error, 1)
	go func() {
		defer close(ch)
		if err := w.run(ctx, create, rev); err != nil {
			ch <- err
		}
	}()
	return ch
}

// run follows the key until its hold has certainly ended (the error to
// report) or the watch must end without a report (nil). rev is the last
// revision known to have been seen, create the key's create revision: both
// 0 when the key must be read first.
func (w *leaseWatch) run(ctx context.Context, create, rev int64) error {
	backoff := leaseWatchMinBackoff
	for {
		if rev == 0 {
			kv, r, err := w.look(ctx)
			if w.looked != nil {
				w.looked()
			}
			switch {
			case errors.Is(err, errGiveUp):
				return nil
			case errors.Is(err, coord.ErrLeaseLost):
				return err // lost
			case err != nil:
				// Retried below, after the back-off.
			case create != 0 && kv.CreateRevision != create:
				return nil // the key was put again: not the hold we follow
			case decodeMeta(kv.Value).StopRequestedAt != nil:
				return w.asked()
			default:
				create, rev = kv.CreateRevision, r
				backoff = leaseWatchMinBackoff
			}
		}
		if rev != 0 {
			start := time.Now()
			var err error
			if rev, err = w.follow(ctx, create, rev); err != nil {
				return err
			}
			if time.Since(start) > leaseWatchMaxBackoff {
				backoff = leaseWatchMinBackoff // it had worked for a while
			}
		}
		if w.c.closed.Load() || !pause(ctx, backoff) {
			return nil
		}
		backoff = min(2*backoff, leaseWatchMaxBackoff)
	}
}

// errGiveUp: the watch cannot tell for certain whether the hold ended.
var errGiveUp = errors.New("lease watch: no certain answer")

// look reads the key: it returns the key and the revision of the read,
// or lost when the key is gone and etcd no longer has the lease, or
// errGiveUp when the key is gone but its lease lives.
func (w *leaseWatch) look(ctx context.Context) (*mvccpb.KeyValue, int64, error) {
	resp, err := w.c.cli.Get(ctx, w.key)
	if err != nil {
		return nil, 0, err
	}
	if len(resp.Kvs) > 0 {
		return resp.Kvs[0], resp.Header.Revision, nil
	}
	ttl, err := w.c.cli.TimeToLive(ctx, w.id)
	switch {
	case err != nil:
		return nil, 0, err
	case ttl.TTL == -1: // etcd's answer for a lease it does not have
		return nil, 0, w.lost()
	}
	return nil, 0, errGiveUp
}

// follow watches the key from rev+1 on: its deletion, and puts of it (the
// only ones after the holder's claim are stop requests). It returns lost
// when the deletion came, asked when a put of the key with the create
// revision create carries a stop request; otherwise, when the watch ended,
// the revision to go on from: the last one seen, or 0 when the key must be
// read again (the revision was compacted).
func (w *leaseWatch) follow(ctx context.Context, create, rev int64) (int64, error) {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	for wr := range w.c.cli.Watch(wctx, w.key, clientv3.WithRev(rev+1)) {
		if wr.CompactRevision != 0 {
			return 0, nil
		}
		if wr.Canceled || wr.Err() != nil {
			return rev, nil
		}
		for _, ev := range wr.Events {
			if string(ev.Kv.Key) != w.key {
				continue
			}
			switch {
			case ev.Type == mvccpb.DELETE:
				return rev, w.lost()
			case ev.Kv.CreateRevision == create && decodeMeta(ev.Kv.Value).StopRequestedAt != nil:
				return rev, w.asked()
			}
			rev = max(rev, ev.Kv.ModRevision)
		}
	}
	return rev, nil
}

// asked is the error reported for a stop request.
func (w *leaseWatch) asked() error {
	return fmt.Errorf("%w: lease %s on %q: a stop was requested", coord.ErrStopRequested, formatID(w.id), w.name)
}

// lost is the error reported when the hold has ended: what Renew says of a
// lease that has ended.
func (w *leaseWatch) lost() error {
	return fmt.Errorf("%w: lease %s on %q has ended", coord.ErrLeaseLost, formatID(w.id), w.name)
}
