package etcd

import (
	"context"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// leases is what a Coordinator remembers of the etcd leases it granted.
//
// own maps each lease that put a key on a lock through this Coordinator to
// that lock and to its last acknowledged grant or renewal. Renew and
// Release of such a lease skip the read that checks the key: fence removes
// a key only by revoking its lease or, below, by deleting it itself, so
// while the lease lives (the keep-alive says so) its key is there. A lease
// id that this Coordinator did not put on the lock (given by another
// process, or with another lock's name) is still checked with a read first.
//
// spares: once a Coordinator has acquired twice (a process that takes locks
// in a loop, not `fence run`), Release deletes the holder's key and keeps
// its lease, and the next Acquire of the same lock with the same TTL puts
// its key on that lease, as concurrency.Mutex does with its session's
// lease: a loop of acquire and release then costs one transaction and one
// delete, not a grant, a transaction and a revoke. A kept lease is not
// renewed while it waits; one older than a tenth of its TTL is renewed
// (one keep-alive, which etcd answers without consensus) before it is
// used, so every acquisition's Sent and TTL are as fresh as a grant's.
// Successive holdings of a lock by one Coordinator may thus have the same
// lease id; the token tells them apart. Close revokes the kept leases.
//
// ahead: a lease granted by New beside its connection check, for the first
// Acquire of the lock that Config.Ahead names, while it is in flight or
// until that Acquire takes it (see Ahead). Once answered it is used as a
// kept lease is.
type leases struct {
	mu       sync.Mutex
	own      map[clientv3.LeaseID]*owned
	spares   map[spareKey]spare
	ahead    *aheadGrant
	acquires int
	closed   bool
}

// aheadGrant is the grant New starts for Config.Ahead. done is closed when
// it is answered; then, unless err is set, sp is the lease.
type aheadGrant struct {
	key    spareKey
	cancel context.CancelFunc
	done   chan struct{}
	sp     spare
	err    error
}

// leaseSeconds is the TTL in whole seconds that Acquire asks etcd for.
func leaseSeconds(ttl time.Duration) int64 {
	return int64((ttl + time.Second - 1) / time.Second)
}

// grantAhead starts the grant of a's lease (nothing when a names no lock
// or no TTL).
func (c *Coordinator) grantAhead(a Ahead) {
	if a.Lock == "" || a.TTL <= 0 {
		return
	}
	ctx, cancel := context.WithCancel(c.ctx)
	g := &aheadGrant{key: spareKey{a.Lock, leaseSeconds(a.TTL)}, cancel: cancel, done: make(chan struct{})}
	c.leases.mu.Lock()
	c.leases.ahead = g
	c.leases.mu.Unlock()
	go func() {
		defer close(g.done)
		defer cancel()
		sent := time.Now()
		resp, err := c.cli.Grant(ctx, g.key.secs)
		switch {
		case err != nil:
			g.err = err
		case resp.TTL <= 0:
			g.err = rpctypes.ErrLeaseNotFound
		default:
			g.sp = spare{id: resp.ID, ack: ack{sent: sent, ttl: time.Duration(resp.TTL) * time.Second}}
		}
	}()
}

// aheadDropWait is how long dropAhead waits for the answer of a grant
// still in flight before it cancels it.
const aheadDropWait = 100 * time.Millisecond

// dropAhead ends the grant that New started and that no Acquire took, and
// revokes its lease (New failed, or the Coordinator is closing). A grant
// not answered within aheadDropWait is cancelled: a lease it may have made
// all the same runs out at its TTL.
func (c *Coordinator) dropAhead() {
	l := &c.leases
	l.mu.Lock()
	g := l.ahead
	l.ahead = nil
	l.mu.Unlock()
	if g == nil {
		return
	}
	select {
	case <-g.done:
	case <-time.After(aheadDropWait):
		g.cancel()
		<-g.done
	}
	if g.err == nil {
		c.revokeNow(g.sp.id)
	}
}

// ack is a lease's last acknowledged grant or renewal: the request's send
// time and the TTL it granted. The lease lives at least until sent+ttl.
type ack struct {
	sent time.Time
	ttl  time.Duration
}

// owned is a lease with a key on a lock, through this Coordinator.
type owned struct {
	name string
	secs int64 // the TTL asked for, in seconds
	// slotted: the lease holds a semaphore's slot, whose slot key goes
	// only with the lease: it is never kept.
	slotted bool
	// create is the create revision of the lease's key on the lock (its
	// token): a watch of the key can start from there without reading it.
	create int64
	ack
}

type spareKey struct {
	name string
	secs int64
}

// spare is a kept lease and its last acknowledged request.
type spare struct {
	id clientv3.LeaseID
	ack
}

func (l *leases) init() {
	l.own = map[clientv3.LeaseID]*owned{}
	l.spares = map[spareKey]spare{}
}

// owns tells whether lease id put its key on lock name through this
// Coordinator and has not been released since.
func (l *leases) owns(name string, id clientv3.LeaseID) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	o, ok := l.own[id]
	return ok && o.name == name
}

func (l *leases) add(name string, secs int64, id clientv3.LeaseID, create int64, ttl time.Duration, sent time.Time, slotted bool) {
	l.mu.Lock()
	l.own[id] = &owned{name: name, secs: secs, slotted: slotted, create: create, ack: ack{sent: sent, ttl: ttl}}
	l.mu.Unlock()
}

// created returns the create revision of the key that owned lease id put
// on lock name (false when it is not owned on name).
func (l *leases) created(name string, id clientv3.LeaseID) (int64, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	o, ok := l.own[id]
	if !ok || o.name != name || o.create <= 0 {
		return 0, false
	}
	return o.create, true
}

// acked records an acknowledged renewal of an owned lease.
func (l *leases) acked(id clientv3.LeaseID, ttl time.Duration, sent time.Time) {
	l.mu.Lock()
	if o, ok := l.own[id]; ok && sent.After(o.sent) {
		o.ttl, o.sent = ttl, sent
	}
	l.mu.Unlock()
}

func (l *leases) forget(id clientv3.LeaseID) {
	l.mu.Lock()
	delete(l.own, id)
	l.mu.Unlock()
}

// keep says whether Release of owned lease id on name should keep the lease
// (delete its key only). It reserves the lock's spare slot: the caller
// calls kept after the delete, or drop when it failed.
func (l *leases) keep(name string, id clientv3.LeaseID) (*owned, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	o, ok := l.own[id]
	if !ok || o.name != name || l.acquires < 2 || l.closed || o.slotted {
		return nil, false
	}
	if _, taken := l.spares[spareKey{name, o.secs}]; taken {
		return nil, false
	}
	l.spares[spareKey{name, o.secs}] = spare{} // reserved: not usable while id is zero
	return o, true
}

func (l *leases) kept(name string, id clientv3.LeaseID, o *owned) {
	l.mu.Lock()
	delete(l.own, id)
	l.spares[spareKey{name, o.secs}] = spare{id: id, ack: o.ack}
	l.mu.Unlock()
}

func (l *leases) drop(name string, o *owned) {
	l.mu.Lock()
	delete(l.spares, spareKey{name, o.secs})
	l.mu.Unlock()
}

// grant returns a lease of secs seconds for lock name: the lock's kept
// lease when there is one, else a new grant. sent is the send time of the
// request that last extended it; reused tells that it was kept.
func (c *Coordinator) grant(ctx context.Context, name string, secs int64) (id clientv3.LeaseID, ttl time.Duration, sent time.Time, reused bool, err error) {
	l := &c.leases
	l.mu.Lock()
	sp, ok := l.spares[spareKey{name, secs}]
	if ok && sp.id != 0 {
		delete(l.spares, spareKey{name, secs})
	} else {
		ok = false
	}
	ag := l.ahead
	if ag != nil && ag.key == (spareKey{name, secs}) && !ok {
		l.ahead = nil
	} else {
		ag = nil
	}
	l.acquires++
	l.mu.Unlock()
	if ag != nil { // New's grant for this lock: its answer, as a kept lease
		select {
		case <-ag.done:
			sp, ok = ag.sp, ag.err == nil
		case <-ctx.Done():
			go func() { // nobody will take it now
				<-ag.done
				if ag.err == nil {
					c.revoke(ag.sp.id)
				}
			}()
			return 0, 0, time.Time{}, false, ctx.Err()
		}
	}
	if ok {
		if time.Since(sp.sent) < sp.ttl/10 {
			return sp.id, sp.ttl, sp.sent, true, nil
		}
		if t, sent, err := c.ka.renew(ctx, sp.id); err == nil && t > 0 {
			return sp.id, time.Duration(t) * time.Second, sent, true, nil
		}
		c.revoke(sp.id) // gone, or etcd is not answering: a fresh grant says which
	}
	sent = time.Now()
	g, err := c.cli.Grant(ctx, secs)
	if err != nil {
		return 0, 0, time.Time{}, false, err
	}
	return g.ID, time.Duration(g.TTL) * time.Second, sent, false, nil
}

// closeLeases revokes the kept leases and the lease granted ahead.
func (c *Coordinator) closeLeases() {
	c.dropAhead()
	l := &c.leases
	l.mu.Lock()
	l.closed = true
	spares := l.spares
	l.spares = map[spareKey]spare{}
	l.mu.Unlock()
	for _, sp := range spares {
		if sp.id != 0 {
			c.revokeNow(sp.id)
		}
	}
}
