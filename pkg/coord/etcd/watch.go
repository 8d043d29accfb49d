package etcd

import (
	"cmp"
	"context"
	"maps"
	"slices"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/internal/coordkit"
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
// changed; EventLimit when the operator limit that binds it changed (a
// second watch, of <prefix>limits/, from the same revision; also for a
// lock with a limit of its own and no keys, as List shows it). Every
// event's Info carries the lock's limit. etcd renewals are not visible, so
// there is no EventRenewed.
func (c *coordinator) Watch(ctx context.Context, prefix string) (<-chan coord.Event, error) {
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
	c      *coordinator
	prefix string
	rng    string // key prefix of every lock under prefix
	ch     chan coord.Event

	rev   int64 // the last revision applied
	locks map[string]*watched
	// The limit keys and the limits they hold; a key fence did not write
	// leaves the limits as they were (grants fail closed on it).
	lkvs   map[string]*mvccpb.KeyValue
	limits []coord.Limit
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
			if w.c.closed.Load() || !pause(ctx, backoff) {
				return
			}
		}
		if !w.send(ctx, coord.Event{Type: coord.EventReset}) {
			return
		}
	}
}

// resync reads every lock under the prefix and the limits, at one
// revision, and that revision.
func (w *watcher) resync(ctx context.Context) error {
	resp, err := w.c.cli.Txn(ctx).Then(clientv3.OpGet(w.rng, clientv3.WithPrefix()), w.c.limitsGet()).Commit()
	if err != nil {
		return err
	}
	w.rev = resp.Header.Revision
	w.locks = map[string]*watched{}
	for _, kv := range resp.Responses[0].GetResponseRange().Kvs {
		if lk := w.lock(string(kv.Key)); lk != nil {
			lk.kvs[string(kv.Key)] = kv
		}
	}
	w.lkvs = map[string]*mvccpb.KeyValue{}
	for _, kv := range resp.Responses[1].GetResponseRange().Kvs {
		w.lkvs[string(kv.Key)] = kv
	}
	w.decodeLimits()
	for name, lk := range w.locks {
		lk.info, _ = w.c.lockInfo(ctx, name, sorted(lk.kvs), false)
		lk.info.Limit = coordkit.EffectiveLimit(w.limits, name)
	}
	return nil
}

// decodeLimits sets limits from the limit keys, unless one of them is not
// fence's.
func (w *watcher) decodeLimits() {
	if ls, err := w.c.decodeLimits(slices.Collect(maps.Values(w.lkvs))); err == nil {
		w.limits = ls
	}
}

// lock returns the lock a key belongs to, nil when it is not one of ours.
func (w *watcher) lock(key string) *watched {
	name, ok := w.c.parseKey(key)
	if !ok || !strings.HasPrefix(name, w.prefix) {
		return nil
	}
	lk := w.locks[name]
	if lk == nil {
		lk = &watched{kvs: map[string]*mvccpb.KeyValue{}, info: coord.LockInfo{Name: name}}
		w.locks[name] = lk
	}
	return lk
}

// follow applies the events of the watches of the locks and of the limits
// until either ends.
func (w *watcher) follow(ctx context.Context) {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	locks := w.c.cli.Watch(wctx, w.rng, clientv3.WithPrefix(), clientv3.WithRev(w.rev+1))
	limits := w.c.cli.Watch(wctx, w.c.limitsRange(), clientv3.WithPrefix(), clientv3.WithRev(w.rev+1))
	for {
		var wr clientv3.WatchResponse
		var ok bool
		select {
		case wr, ok = <-locks:
		case wr, ok = <-limits:
		}
		if !ok || wr.Err() != nil || wr.Canceled {
			return
		}
		for _, ev := range wr.Events {
			if !w.apply(ctx, ev) {
				return
			}
		}
	}
}

// applyLimit applies the change of a limit key and sends EventLimit for
// each lock whose effective limit it changed: the locks the watcher knows,
// and those with a limit of their own and no keys, by name. It returns false when
// ctx ended.
func (w *watcher) applyLimit(ctx context.Context, ev *clientv3.Event) bool {
	key := string(ev.Kv.Key)
	if ev.Type == mvccpb.DELETE {
		delete(w.lkvs, key)
	} else {
		w.lkvs[key] = ev.Kv
	}
	old := w.limits
	w.decodeLimits()
	names := slices.Collect(maps.Keys(w.locks))
	for _, l := range slices.Concat(old, w.limits) {
		if !l.Prefix && strings.HasPrefix(l.Name, w.prefix) {
			names = append(names, l.Name)
		}
	}
	slices.Sort(names)
	for _, name := range slices.Compact(names) {
		nl := coordkit.EffectiveLimit(w.limits, name)
		info := coord.LockInfo{Name: name}
		if lk := w.locks[name]; lk != nil {
			if sameLimit(lk.info.Limit, nl) {
				continue
			}
			lk.info.Limit = nl
			info = lk.info
			if info.Held {
				if full, err := w.c.lockInfo(ctx, name, sorted(lk.kvs), true); err == nil {
					info = full
				}
			}
		} else if sameLimit(coordkit.EffectiveLimit(old, name), nl) {
			continue
		}
		info.Limit = nl
		if !w.send(ctx, coord.Event{Type: coord.EventLimit, Info: info}) {
			return false
		}
	}
	return true
}

// sameLimit reports whether a and b are the same limit (or both none).
func sameLimit(a, b *coord.Limit) bool {
	return a == nil && b == nil || a != nil && b != nil && *a == *b
}

// apply applies one change and sends the lock's new state when it differs
// in holder or queue. It returns false when ctx ended.
func (w *watcher) apply(ctx context.Context, ev *clientv3.Event) bool {
	w.rev = ev.Kv.ModRevision
	key := string(ev.Kv.Key)
	if strings.HasPrefix(key, w.c.limitsRange()) {
		return w.applyLimit(ctx, ev)
	}
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
	cur.Limit = coordkit.EffectiveLimit(w.limits, prev.Name)
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
	case cur.Waiters != prev.Waiters || !slices.Equal(cur.Queue, prev.Queue):
		// Also on a free lock: the queue of one held back by a limit.
		typ = coord.EventWaiters
	default:
		return true // e.g. a new holder recording acquired_at
	}
	if cur.Held {
		if full, err := w.c.lockInfo(ctx, cur.Name, kvs, true); err == nil {
			full.Limit = cur.Limit
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
	return slices.SortedFunc(maps.Values(m), func(a, b *mvccpb.KeyValue) int {
		return cmp.Compare(a.CreateRevision, b.CreateRevision)
	})
}
