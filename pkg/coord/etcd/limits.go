package etcd

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/internal/coordkit"
)

// Limits (coord.Limiter). Each operator limit is one key without a lease:
// <prefix>limits/lock/<escape(name)> for a lock, <prefix>limits/prefix/
// <escape(P)> for every lock under P (P may be empty), whose value is the
// limit as JSON (coord.Limit). Every transaction that grants a lock
// compares the limits it went by: the fast path of Acquire (a free lock
// taken at once) only when no limit key exists under <prefix>limits/, and
// otherwise when no limit key was changed after the read that allowed the
// grant. A limit put after that read fails the grant, which reads the
// limits again: once SetLimit has returned, no grant exceeds it. A waiter
// that is first in line but held back by a limit watches <prefix>limits/
// (and still only the key ahead of it: none) and tries again at its next
// change.

func (c *coordinator) limitsRange() string { return c.prefix + "limits/" }

func (c *coordinator) limitKey(name string, prefix bool) string {
	if prefix {
		return c.prefix + "limits/prefix/" + url.PathEscape(name)
	}
	return c.prefix + "limits/lock/" + url.PathEscape(name)
}

// limitsGet reads every limit, in a transaction's Else.
func (c *coordinator) limitsGet() clientv3.Op {
	return clientv3.OpGet(c.limitsRange(), clientv3.WithPrefix())
}

// limitsCmp is true when the limits are as read at revision rev (0: when
// there is no limit at all).
func (c *coordinator) limitsCmp(rev int64) clientv3.Cmp {
	if rev == 0 {
		return clientv3.Compare(clientv3.CreateRevision(c.limitsRange()), "=", 0).WithPrefix()
	}
	return clientv3.Compare(clientv3.ModRevision(c.limitsRange()), "<", rev+1).WithPrefix()
}

// decodeLimits reads limit keys. A key that is not a valid limit fails
// closed: no grant is made on limits that cannot be read.
func (c *coordinator) decodeLimits(kvs []*mvccpb.KeyValue) ([]coord.Limit, error) {
	ls := make([]coord.Limit, 0, len(kvs))
	for _, kv := range kvs {
		var l coord.Limit
		err := json.Unmarshal(kv.Value, &l)
		if err == nil {
			err = coord.ValidateLimit(l)
		}
		if err == nil && c.limitKey(l.Name, l.Prefix) != string(kv.Key) {
			err = fmt.Errorf("it is for %s", l.Scope())
		}
		if err != nil {
			return nil, fmt.Errorf("%w: limit key %s is not a limit fence wrote (%v): repair or delete it", coord.ErrUnavailable, kv.Key, err)
		}
		ls = append(ls, l)
	}
	return ls, nil
}

// readLimits reads every limit.
func (c *coordinator) readLimits(ctx context.Context) ([]coord.Limit, error) {
	resp, err := c.cli.Get(ctx, c.limitsRange(), clientv3.WithPrefix())
	if err != nil {
		return nil, c.mapErr(ctx, "read limits", err)
	}
	return c.decodeLimits(resp.Kvs)
}

// effectiveOf is the limit that binds lock name among the limit keys kvs.
func (c *coordinator) effectiveOf(name string, kvs []*mvccpb.KeyValue) (*coord.Limit, error) {
	ls, err := c.decodeLimits(kvs)
	if err != nil {
		return nil, err
	}
	return coordkit.EffectiveLimit(ls, name), nil
}

// SetLimit puts the limit's key (coord.Limiter).
func (c *coordinator) SetLimit(ctx context.Context, l coord.Limit) error {
	if err := coord.ValidateLimit(l); err != nil {
		return err
	}
	if err := c.check(); err != nil {
		return err
	}
	if l.At.IsZero() {
		l.At = time.Now()
	}
	l.At = l.At.UTC().Round(0)
	b, err := json.Marshal(l)
	if err != nil {
		return fmt.Errorf("%w: encode limit: %v", coord.ErrInvalid, err)
	}
	if _, err := c.cli.Put(ctx, c.limitKey(l.Name, l.Prefix), string(b)); err != nil {
		return c.mapErr(ctx, "set limit", err)
	}
	return nil
}

// ClearLimit deletes the limit's key (coord.Limiter).
func (c *coordinator) ClearLimit(ctx context.Context, name string, prefix bool) (coord.Limit, bool, error) {
	if err := coord.ValidateLimit(coord.Limit{Name: name, Prefix: prefix}); err != nil {
		return coord.Limit{}, false, err
	}
	if err := c.check(); err != nil {
		return coord.Limit{}, false, err
	}
	resp, err := c.cli.Delete(ctx, c.limitKey(name, prefix), clientv3.WithPrevKV())
	if err != nil {
		return coord.Limit{}, false, c.mapErr(ctx, "clear limit", err)
	}
	if len(resp.PrevKvs) == 0 {
		return coord.Limit{}, false, nil
	}
	var old coord.Limit
	_ = json.Unmarshal(resp.PrevKvs[0].Value, &old) // it is gone either way
	return old, true, nil
}

// Limits returns every limit in force (coord.Limiter).
func (c *coordinator) Limits(ctx context.Context) ([]coord.Limit, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	ls, err := c.readLimits(ctx)
	if err != nil {
		return nil, err
	}
	slices.SortFunc(ls, func(a, b coord.Limit) int {
		if a.Prefix != b.Prefix {
			if a.Prefix {
				return 1
			}
			return -1
		}
		return strings.Compare(a.Name, b.Name)
	})
	return ls, nil
}
