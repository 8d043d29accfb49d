package etcd

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"sort"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/internal/coordkit"
)

// Completion records (coord.Completer, `fence run --once`).
//
// The record of key KEY of lock NAME is the key
//
//	<prefix>once/<url.PathEscape(NAME)>/<url.PathEscape(KEY)>
//
// whose value is the coord.Completion as JSON, attached to an etcd lease of
// its own whose TTL is the retention: etcd deletes the record when it runs
// out. Complete writes it in one transaction that compares, with the
// record, that the lease's key on the lock is still there with the lease's
// token as its create revision, and that no key of the lock is older (the
// lease holds the lock, it is not waiting): a lease that expired, was
// revoked or released cannot write a record. The retention lease is granted
// first and revoked when the transaction writes nothing.

func (c *coordinator) onceRange(lock string) string {
	return c.prefix + "once/" + url.PathEscape(lock) + "/"
}

func (c *coordinator) onceKey(lock, key string) string {
	return c.onceRange(lock) + url.PathEscape(key)
}

// Completion returns the record of (lock, key).
func (c *coordinator) Completion(ctx context.Context, lock, key string) (coord.Completion, bool, error) {
	if err := c.checkOnce(lock, key, 0); err != nil {
		return coord.Completion{}, false, err
	}
	resp, err := c.cli.Get(ctx, c.onceKey(lock, key))
	if err != nil {
		return coord.Completion{}, false, c.mapErr(ctx, "read completion", err)
	}
	if len(resp.Kvs) == 0 {
		return coord.Completion{}, false, nil
	}
	rec, ok := decodeCompletion(lock, resp.Kvs[0].Value)
	if !ok || rec.Key != key {
		return coord.Completion{}, false, fmt.Errorf("%w: etcd: completion record %s is not fence's", coord.ErrUnavailable, c.onceKey(lock, key))
	}
	return rec, true, nil
}

// Complete writes rec in one transaction with the check that the lease
// leaseID, of token rec.Token, holds rec.Lock.
func (c *coordinator) Complete(ctx context.Context, leaseID string, rec coord.Completion, keep time.Duration) error {
	if err := c.checkOnce(rec.Lock, rec.Key, keep); err != nil {
		return err
	}
	id, err := parseID(leaseID)
	if err != nil {
		return err
	}
	if rec.Token == 0 || rec.Token > 1<<63-1 {
		return fmt.Errorf("%w: completion of %q on %q: token %d is not a lease's", coord.ErrInvalid, rec.Key, rec.Lock, rec.Token)
	}
	rec, ret, err := c.retain(ctx, "complete", rec, keep)
	if err != nil {
		return err
	}
	holderKey := c.leaseKey(rec.Lock, id)
	recKey := c.onceKey(rec.Lock, rec.Key)
	tok := int64(rec.Token)
	resp, err := c.cli.Txn(ctx).If(
		clientv3.Compare(clientv3.CreateRevision(holderKey), "=", tok),
		clientv3.Compare(clientv3.CreateRevision(c.lockRange(rec.Lock)), ">", tok-1).WithPrefix(),
		clientv3.Compare(clientv3.CreateRevision(recKey), "=", 0),
	).Then(
		clientv3.OpPut(recKey, encodeCompletion(rec), clientv3.WithLease(ret)),
	).Else(
		clientv3.OpGet(holderKey, clientv3.WithCountOnly()),
		clientv3.OpGet(c.lockRange(rec.Lock), clientv3.WithPrefix(), byCreate, clientv3.WithLimit(1)),
	).Commit()
	if err != nil {
		c.revoke(ret)
		return c.mapErr(ctx, "complete", err)
	}
	if resp.Succeeded {
		return nil
	}
	c.revoke(ret)
	holds := resp.Responses[0].GetResponseRange().Count > 0
	if kvs := resp.Responses[1].GetResponseRange().Kvs; holds && len(kvs) > 0 && kvs[0].CreateRevision == tok {
		return nil // the lease holds the lock: the record was there (marked by hand)
	}
	return fmt.Errorf("%s: cannot record the completion of %q: %w: lease %s (token %d) no longer holds the lock", rec.Lock, rec.Key, coord.ErrLeaseLost, leaseID, rec.Token)
}

// Mark writes rec without a lease, replacing the record of its key.
func (c *coordinator) Mark(ctx context.Context, rec coord.Completion, keep time.Duration) error {
	if err := c.checkOnce(rec.Lock, rec.Key, keep); err != nil {
		return err
	}
	rec, ret, err := c.retain(ctx, "mark", rec, keep)
	if err != nil {
		return err
	}
	resp, err := c.cli.Put(ctx, c.onceKey(rec.Lock, rec.Key), encodeCompletion(rec), clientv3.WithLease(ret), clientv3.WithPrevKV())
	if err != nil {
		c.revoke(ret)
		return c.mapErr(ctx, "mark", err)
	}
	if p := resp.PrevKv; p != nil && p.Lease != 0 {
		c.revoke(clientv3.LeaseID(p.Lease)) // the replaced record's retention
	}
	return nil
}

// Forget deletes the record of (lock, key) and its retention lease.
func (c *coordinator) Forget(ctx context.Context, lock, key string) (bool, error) {
	if err := c.checkOnce(lock, key, 0); err != nil {
		return false, err
	}
	resp, err := c.cli.Delete(ctx, c.onceKey(lock, key), clientv3.WithPrevKV())
	if err != nil {
		return false, c.mapErr(ctx, "forget", err)
	}
	for _, p := range resp.PrevKvs {
		if p.Lease != 0 {
			c.revoke(clientv3.LeaseID(p.Lease))
		}
	}
	return resp.Deleted > 0, nil
}

// Completions lists the records of lock, sorted by key.
func (c *coordinator) Completions(ctx context.Context, lock string) ([]coord.Completion, error) {
	if err := coord.ValidateName(lock); err != nil {
		return nil, err
	}
	if err := c.check(); err != nil {
		return nil, err
	}
	resp, err := c.cli.Get(ctx, c.onceRange(lock), clientv3.WithPrefix())
	if err != nil {
		return nil, c.mapErr(ctx, "list completions", err)
	}
	var out []coord.Completion
	for _, kv := range resp.Kvs {
		if strings.Contains(strings.TrimPrefix(string(kv.Key), c.onceRange(lock)), "/") {
			continue
		}
		if rec, ok := decodeCompletion(lock, kv.Value); ok {
			out = append(out, rec)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}

// retain sets the record's times (coordkit.Stamp) and grants the etcd
// lease that keeps it.
func (c *coordinator) retain(ctx context.Context, op string, rec coord.Completion, keep time.Duration) (coord.Completion, clientv3.LeaseID, error) {
	rec, keep = coordkit.Stamp(rec, keep)
	ret, err := c.cli.Grant(ctx, seconds(keep))
	if err != nil {
		return rec, 0, c.mapErr(ctx, op, err)
	}
	return rec, ret.ID, nil
}

func encodeCompletion(rec coord.Completion) string {
	b, err := json.Marshal(rec)
	if err != nil {
		panic(err) // strings, numbers and times always marshal
	}
	return string(b)
}

func decodeCompletion(lock string, v []byte) (coord.Completion, bool) {
	var rec coord.Completion
	if json.Unmarshal(v, &rec) != nil || rec.Lock != lock || coord.ValidateKey(rec.Key) != nil {
		return coord.Completion{}, false
	}
	return rec, true
}

// checkOnce is coordkit.CheckOnce, and fails the call on a closed
// coordinator.
func (c *coordinator) checkOnce(lock, key string, keep time.Duration) error {
	if err := coordkit.CheckOnce(lock, key, keep); err != nil {
		return err
	}
	return c.check()
}
