package etcd

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/internal/coordkit"
)

// holderKV reads lock name and returns its holder's key (nil when the lock
// is free) with the lock's info (with the holder's TTL when withTTL),
// refusing a holder whose token is not token (0: any).
func (c *coordinator) holderKV(ctx context.Context, name string, token uint64, op string, withTTL bool) (*mvccpb.KeyValue, coord.LockInfo, error) {
	kvs, info, err := c.readLock(ctx, name, op, withTTL)
	if err != nil {
		return nil, info, err
	}
	if !info.Held {
		return nil, info, fmt.Errorf("%w: %q", coord.ErrNotHeld, name)
	}
	if len(info.Holders) > 1 {
		// A semaphore's holder is named by its token.
		if token == 0 {
			return nil, info, coordkit.ManyHolders(info)
		}
		h, ok := coordkit.HeldBy(info, token)
		if !ok {
			return nil, info, fmt.Errorf("%w: lock %q has no holder with token %d (%v)", coord.ErrOtherToken, name, token, coordkit.ManyHolders(info))
		}
		coordkit.SetHolders(&info, info.Slots, []coord.HolderInfo{h})
	}
	if token != 0 && info.Token != token {
		return nil, info, fmt.Errorf("%w: lock %q is held by %s under token %d, not %d", coord.ErrOtherToken, name, info.Holder, info.Token, token)
	}
	if info.LeaseID == "" {
		return nil, info, fmt.Errorf("%w: the holder's key on %q has no lease: it was not written by fence", coord.ErrUnavailable, name)
	}
	for _, kv := range kvs {
		if uint64(kv.CreateRevision) == info.Token {
			return kv, info, nil
		}
	}
	return kvs[0], info, nil
}

// RequestStop implements coord.Coordinator: it sets stop_requested_at in
// the value of the holder's key, with one transaction that puts it only if
// the key has not changed since it was read (and keeps the key's lease).
// The holder's lease watch (WatchLease) follows that very key and sees the
// put at once. A key without "supervised" (a lease acquired without
// AcquireOptions.Process: fence acquire) is not asked.
func (c *coordinator) RequestStop(ctx context.Context, name string, token uint64) (coord.LockInfo, bool, error) {
	for {
		kv, info, err := c.holderKV(ctx, name, token, "stop request", true)
		if err != nil {
			return info, false, err
		}
		m := decodeMeta(kv.Value)
		if !m.Supervised {
			return info, false, nil
		}
		if m.StopRequestedAt != nil {
			return info, true, nil // asked already
		}
		now := time.Now()
		m.StopRequestedAt = &now
		resp, err := c.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.ModRevision(string(kv.Key)), "=", kv.ModRevision)).
			Then(clientv3.OpPut(string(kv.Key), m.encode(), clientv3.WithIgnoreLease())).
			Commit()
		switch {
		case err != nil:
			return info, false, c.mapErr(ctx, "stop request", err)
		case resp.Succeeded:
			return info, true, nil
		}
		// The key changed (a new holder recording acquired_at, a release):
		// read again.
	}
}

// RevokeToken implements coord.Coordinator: Revoke, limited to the holder
// with token. The lease read with that token is revoked.
func (c *coordinator) RevokeToken(ctx context.Context, name string, token uint64) (coord.LockInfo, error) {
	_, info, err := c.holderKV(ctx, name, token, "revoke", true)
	if err != nil {
		return info, err
	}
	id, err := parseID(info.LeaseID)
	if err != nil {
		return info, err
	}
	// A lease that ended since the read (released, expired) is what the
	// caller asked for: not an error.
	if err := c.revokeBounded(ctx, id); err != nil {
		return info, c.mapErr(ctx, "revoke", err)
	}
	return info, nil
}

// WaitEnded implements coord.Coordinator: it reads the holder's key and
// watches it until it is deleted (the lease released, revoked or expired),
// as a waiter watches the key ahead (watchChange: a watch that lost track
// or went deaf reads the key again).
func (c *coordinator) WaitEnded(ctx context.Context, name string, token uint64) error {
	if token == 0 {
		return fmt.Errorf("%w: WaitEnded needs a token", coord.ErrInvalid)
	}
	backoff := leaseWatchMinBackoff
	for {
		kv, _, err := c.holderKV(ctx, name, token, "wait", false)
		switch {
		case errors.Is(err, coord.ErrNotHeld), errors.Is(err, coord.ErrOtherToken):
			return nil
		case err == nil:
			err = c.watchChange(ctx, watchSpec{kv: kv, deletes: true}, kv.ModRevision+1, nil)
		}
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case c.closed.Load():
			return errClosed
		case err == nil:
			continue // deleted, or the watch lost track: read again
		}
		if !pause(ctx, backoff) {
			return ctx.Err()
		}
		backoff = min(2*backoff, leaseWatchMaxBackoff)
	}
}
