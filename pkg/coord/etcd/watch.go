package etcd

import (
	"context"
	"sort"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fence-dev/fence/pkg/coord"
)

// Watch sends the state of each lock under prefix after every change to its
// keys, until ctx ends. It reads the locks under prefix once, then follows
// one etcd watch from that revision, keeping the keys in memory, so every
// change is reported in order and none is missed. When the watch is lost
// (history compacted, no leader, the watch cancelled by the server) it
// sends EventReset, reads the locks again and goes on from there.
//
// Event types: EventAcquired when a lock gets a new holder (token), also
// when a waiter takes over from a releasing or expiring holder;
// EventReleased when a lock becomes free; EventWaiters when only its queue
// changed. etcd renewals are not visible, so there is no EventRenewed.
func (c *Coordinator) Watch(ctx context.Context, prefix string) (<-chan coord.Event, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	w := &watcher{c: c, prefix: prefix, rng: c.locksKey(prefix), ch: make(chan coord.Event, 64)}
	if err := w.resync(ctx); err != nil {
		return nil, c.mapErr(ctx, "watch", err)
	}
	go w.run(c.bound(ctx))
	return w.ch, nil
}

type watcher struct {
	c      *Coordinator
	prefix string
	rng    string // key prefix of every lock under prefix
	ch     chan coord.Event

	rev   int64 // the last revision applied
	locks map[string]*watched
}

// watched is what the watcher knows of one lock.
type watched struct {
	kvs  map[string]*mvccpb.KeyValue
	info coord.LockInfo // after the last change (without TTLs)
}

func (w *watcher) run(ctx context.Context) {
	defer close(w.ch)
	for {
		w.follow(ctx)
		if ctx.Err() != nil || w.c.closed.Load() {
			return
		}
		// Read again first, then tell: a receiver that reads the locks
		// when it gets the reset reads at the resync's revision or later,
		// and every change after the resync comes as an event.
		for backoff := 100 * time.Millisecond; ; backoff = min(2*backoff, 5*time.Second) {
			if w.resync(ctx) == nil {
				break
			}
			if w.c.closed.Load() {
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
		}
		if !w.send(ctx, coord.Event{Type: coord.EventReset}) {
			return
		}
	}
}

// resync reads every lock under the prefix and the revision of that read.
func (w *watcher) resync(ctx context.Context) error {
	resp, err := w.c.cli.Get(ctx, w.rng, clientv3.WithPrefix())
	if err != nil {
		return err
	}
	w.rev = resp.Header.Revision
	w.locks = map[string]*watched{}
	for _, kv := range resp.Kvs {
		if lk := w.lock(string(kv.Key)); lk != nil {
			lk.kvs[string(kv.Key)] = kv
		}
	}
	for name, lk := range w.locks {
		lk.info, _ = w.c.lockInfo(ctx, name, sorted(lk.kvs), false)
	}
	return nil
}

// lock returns the lock a key belongs to, nil when it is not one of ours.
func (w *watcher) lock(key string) *watched {
	name, ok := w.c.parseKey(key)
	if !ok || !hasPrefix(name, w.prefix) {
		return nil
	}
	lk := w.locks[name]
	if lk == nil {
		lk = &watched{kvs: map[string]*mvccpb.KeyValue{}, info: coord.LockInfo{Name: name}}
		w.locks[name] = lk
	}
	return lk
}

// follow applies the watch's events until it ends.
func (w *watcher) follow(ctx context.Context) {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	for wr := range w.c.cli.Watch(wctx, w.rng, clientv3.WithPrefix(), clientv3.WithRev(w.rev+1)) {
		if wr.Err() != nil || wr.Canceled {
			return
		}
		for _, ev := range wr.Events {
			if !w.apply(ctx, ev) {
				return
			}
		}
	}
}

// apply applies one change and sends the lock's new state when it differs
// in holder or queue. It returns false when ctx ended.
func (w *watcher) apply(ctx context.Context, ev *clientv3.Event) bool {
	w.rev = ev.Kv.ModRevision
	key := string(ev.Kv.Key)
	lk := w.lock(key)
	if lk == nil {
		return true
	}
	if ev.Type == mvccpb.DELETE {
		delete(lk.kvs, key)
	} else {
		lk.kvs[key] = ev.Kv
	}
	prev := lk.info
	kvs := sorted(lk.kvs)
	cur, _ := w.c.lockInfo(ctx, prev.Name, kvs, false)
	lk.info = cur
	if len(lk.kvs) == 0 {
		delete(w.locks, prev.Name)
	}
	var typ coord.EventType
	switch {
	case cur.Held && (!prev.Held || cur.Token != prev.Token):
		typ = coord.EventAcquired
	case !cur.Held && prev.Held:
		typ = coord.EventReleased
	case len(cur.Holders) > len(prev.Holders):
		typ = coord.EventAcquired // another holder of a semaphore
	case len(cur.Holders) < len(prev.Holders):
		typ = coord.EventReleased
	case cur.Held && cur.Waiters != prev.Waiters:
		typ = coord.EventWaiters
	default:
		return true // e.g. a new holder recording acquired_at
	}
	if cur.Held {
		if full, err := w.c.lockInfo(ctx, cur.Name, kvs, true); err == nil {
			cur = full
		}
	}
	return w.send(ctx, coord.Event{Type: typ, Info: cur})
}

func (w *watcher) send(ctx context.Context, ev coord.Event) bool {
	select {
	case w.ch <- ev:
		return true
	case <-ctx.Done():
		return false
	}
}

// sorted returns a lock's keys by create revision.
func sorted(m map[string]*mvccpb.KeyValue) []*mvccpb.KeyValue {
	kvs := make([]*mvccpb.KeyValue, 0, len(m))
	for _, kv := range m {
		kvs = append(kvs, kv)
	}
	sort.Slice(kvs, func(i, j int) bool { return kvs[i].CreateRevision < kvs[j].CreateRevision })
	return kvs
}
