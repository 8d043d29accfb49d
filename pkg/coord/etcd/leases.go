package etcd

import (
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// leases is what a coordinator remembers of the etcd leases it granted.
//
// own maps each lease that put a key on a lock through this coordinator to
// that lock and to the key's create revision (its token: a watch of the
// key can start from there without reading it). Renew and Release of such
// a lease skip the read that checks the key: fence removes a key only by
// revoking its lease, so while the lease lives (the keep-alive says so)
// its key is there. A lease id that this coordinator did not put on the
// lock (given by another process, or with another lock's name) is still
// checked with a read first.
type leases struct {
	own sync.Map // clientv3.LeaseID: owned
}

// owned is a lease's key on a lock, put through this coordinator.
type owned struct {
	name   string
	create int64
}

// seconds is d in whole seconds, rounded up: the TTL of an etcd lease.
func seconds(d time.Duration) int64 {
	return int64((d + time.Second - 1) / time.Second)
}

// ack is a lease's last acknowledged grant or renewal: the request's send
// time and the TTL it granted. The lease lives at least until sent+ttl.
type ack struct {
	sent time.Time
	ttl  time.Duration
}

// owned returns the create revision of the key that lease id put on lock
// name through this coordinator, and false when it put none there or was
// released since.
func (l *leases) owned(name string, id clientv3.LeaseID) (int64, bool) {
	if v, ok := l.own.Load(id); ok && v.(owned).name == name {
		return v.(owned).create, true
	}
	return 0, false
}

func (l *leases) add(name string, id clientv3.LeaseID, create int64) {
	l.own.Store(id, owned{name: name, create: create})
}

func (l *leases) forget(id clientv3.LeaseID) { l.own.Delete(id) }
