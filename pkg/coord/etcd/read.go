package etcd

import (
	"context"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/sync/errgroup"

	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/internal/coordkit"
)

// byCreate sorts a lock's keys: holder first, then waiters in line.
var byCreate = clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend)

// Inspect returns the state of lock name, from a linearizable read. The
// holder's TTLLeft is in whole seconds, as etcd reports it.
func (c *coordinator) Inspect(ctx context.Context, name string) (coord.LockInfo, error) {
	_, info, err := c.readLock(ctx, name, "inspect", true)
	if err != nil {
		return info, err
	}
	ls, err := c.readLimits(ctx)
	info.Limit = coordkit.EffectiveLimit(ls, name)
	return info, err
}

// readLock reads lock name: its keys by create revision and its info
// (with the holders' TTLs when ttl).
func (c *coordinator) readLock(ctx context.Context, name, op string, ttl bool) ([]*mvccpb.KeyValue, coord.LockInfo, error) {
	if err := coord.ValidateName(name); err != nil {
		return nil, coord.LockInfo{Name: name}, err
	}
	if err := c.check(); err != nil {
		return nil, coord.LockInfo{Name: name}, err
	}
	resp, err := c.cli.Get(ctx, c.lockRange(name), clientv3.WithPrefix(), byCreate)
	if err != nil {
		return nil, coord.LockInfo{Name: name}, c.mapErr(ctx, op, err)
	}
	info, err := c.lockInfo(ctx, name, resp.Kvs, ttl)
	return resp.Kvs, info, err
}

// List returns the locks whose names start with prefix that have a holder
// or waiters, sorted by name. etcd keeps nothing for a free lock.
func (c *coordinator) List(ctx context.Context, prefix string) ([]coord.LockInfo, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	resp, err := c.cli.Get(ctx, c.locksKey(prefix), clientv3.WithPrefix(), byCreate)
	if err != nil {
		return nil, c.mapErr(ctx, "list", err)
	}
	byName := map[string][]*mvccpb.KeyValue{}
	for _, kv := range resp.Kvs {
		if name, ok := c.parseKey(string(kv.Key)); ok && strings.HasPrefix(name, prefix) {
			byName[name] = append(byName[name], kv)
		}
	}
	names := slices.Collect(maps.Keys(byName))
	// One TimeToLive per held lock: asked by a few workers at once, so that
	// a long list costs round trips divided by the workers, not summed.
	infos := make([]coord.LockInfo, len(names))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(listWorkers)
	for i, name := range names {
		g.Go(func() error {
			var err error
			infos[i], err = c.lockInfo(gctx, name, byName[name], true)
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	limits, err := c.readLimits(ctx)
	if err != nil {
		return nil, err
	}
	for i := range infos {
		infos[i].Limit = coordkit.EffectiveLimit(limits, infos[i].Name)
	}
	infos = coordkit.WithLimited(infos, limits, prefix)
	sort.Slice(infos, func(a, b int) bool { return infos[a].Name < infos[b].Name })
	return infos, nil
}

// listWorkers is how many TimeToLive requests List has in flight.
const listWorkers = 32

// lockInfo describes a lock from its keys sorted by create revision. With
// ttl, it asks etcd for each holder's lease TTL. A semaphore's keys
// (slots.go) with acquired_at hold, the others wait. A lock's holder is
// its oldest key, unless an operator limit holds that first waiter back
// (limits.go): then nobody holds the lock.
func (c *coordinator) lockInfo(ctx context.Context, name string, kvs []*mvccpb.KeyValue, ttl bool) (coord.LockInfo, error) {
	info := coord.LockInfo{Name: name}
	if len(kvs) == 0 {
		return info, nil
	}
	slots := decodeMeta(kvs[0].Value).Slots
	var hs []coord.HolderInfo
	for i, kv := range kvs {
		m := decodeMeta(kv.Value)
		holds := m.AcquiredAt != nil
		if slots <= 1 {
			holds = i == 0 && (m.AcquiredAt != nil || !m.HeldBack)
		}
		if !holds {
			// A waiter, in create order.
			w := coord.Waiter{Holder: m.Holder}
			if m.QueuedAt != nil {
				w.Since = *m.QueuedAt
			}
			if kv.Lease != 0 {
				w.LeaseID = formatID(clientv3.LeaseID(kv.Lease))
			}
			info.Queue = append(info.Queue, w)
			continue
		}
		// A waiter that has just become the holder and not yet recorded
		// it: as far as anyone knows, it has held the lock for no time.
		h := coord.HolderInfo{Slot: m.Slot, Holder: m.Holder, Token: uint64(kv.CreateRevision), AcquiredAt: time.Now()}
		if m.AcquiredAt != nil {
			h.AcquiredAt = *m.AcquiredAt
		}
		if kv.Lease != 0 {
			h.LeaseID = formatID(clientv3.LeaseID(kv.Lease))
		}
		if ttl && kv.Lease != 0 {
			resp, err := c.cli.TimeToLive(ctx, clientv3.LeaseID(kv.Lease))
			if err != nil {
				return info, c.mapErr(ctx, "lease ttl", err)
			}
			if resp.TTL >= 0 { // -1: expired since the read
				h.TTL = time.Duration(resp.GrantedTTL) * time.Second
				h.TTLLeft = time.Duration(resp.TTL) * time.Second
			}
		}
		hs = append(hs, h)
		info.LastToken = max(info.LastToken, h.Token)
	}
	coordkit.SetHolders(&info, slots, hs)
	info.Waiters = len(info.Queue)
	return info, nil
}
