package etcd

import (
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// leases is what a coordinator remembers of the etcd leases it granted.
//
// own maps each lease that put a key on a lock through this coordinator to
// that lock and to its last acknowledged grant or renewal. Renew and
// Release of such a lease skip the read that checks the key: fence removes
// a key only by revoking its lease, so while the lease lives (the
// keep-alive says so) its key is there. A lease id that this coordinator
// did not put on the lock (given by another process, or with another
// lock's name) is still checked with a read first.
type leases struct {
	mu  sync.Mutex
	own map[clientv3.LeaseID]*owned
}

// leaseSeconds is the TTL in whole seconds that Acquire asks etcd for.
func leaseSeconds(ttl time.Duration) int64 {
	return int64((ttl + time.Second - 1) / time.Second)
}

// ack is a lease's last acknowledged grant or renewal: the request's send
// time and the TTL it granted. The lease lives at least until sent+ttl.
type ack struct {
	sent time.Time
	ttl  time.Duration
}

// owned is a lease with a key on a lock, through this coordinator.
type owned struct {
	name string
	// create is the create revision of the lease's key on the lock (its
	// token): a watch of the key can start from there without reading it.
	create int64
	ack
}

func (l *leases) init() {
	l.own = map[clientv3.LeaseID]*owned{}
}

// owns tells whether lease id put its key on lock name through this
// coordinator and has not been released since.
func (l *leases) owns(name string, id clientv3.LeaseID) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	o, ok := l.own[id]
	return ok && o.name == name
}

func (l *leases) add(name string, id clientv3.LeaseID, create int64, ttl time.Duration, sent time.Time) {
	l.mu.Lock()
	l.own[id] = &owned{name: name, create: create, ack: ack{sent: sent, ttl: ttl}}
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
