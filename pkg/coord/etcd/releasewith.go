package etcd

import (
	"context"
	"errors"
	"slices"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fence-dev/fence/pkg/coord"
)

// ReleaseWith releases lease leaseID of lock name, held under token, and
// commits then in the same transaction: one transaction deletes the
// holder's key and runs then, if the key is still the one the lease put on
// the lock with token as its create revision (the lease holds the lock) and
// cmps hold. The next holder's turn comes with that one round trip, and
// what then writes (the history's released event) is on record before it.
// The lease itself is ended after the transaction, off the handoff's path,
// as Release ends it (revoked, or kept for the lock's next acquisition by
// a Coordinator that acquires in a loop).
//
// When the transaction does not commit, nothing is released: held reports
// whether the lease still holds the lock (false: the key is gone, or was
// never on this lock), and resp holds the answers of els. A committed
// resp holds the answers of then. Both hold nothing of ReleaseWith's own
// operations. err after a committed transaction is the failure to end
// the lease (the lock is released; the lease lapses at its TTL unless the
// Coordinator renews it).
func (c *Coordinator) ReleaseWith(ctx context.Context, name, leaseID string, token uint64, cmps []clientv3.Cmp, then, els []clientv3.Op) (resp *clientv3.TxnResponse, held bool, err error) {
	if err := coord.ValidateName(name); err != nil {
		return nil, false, err
	}
	id, err := parseID(leaseID)
	if err != nil {
		return nil, false, err
	}
	if err := c.check(); err != nil {
		return nil, false, err
	}
	key := c.leaseKey(name, id)
	ifs := append([]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(key), "=", int64(token))}, cmps...)
	thens := append([]clientv3.Op{clientv3.OpDelete(key)}, then...)
	elses := append(slices.Clip(els), clientv3.OpGet(key))
	resp, err = c.cli.Txn(ctx).If(ifs...).Then(thens...).Else(elses...).Commit()
	if err != nil {
		return nil, false, c.mapErr(ctx, "release", err)
	}
	if !resp.Succeeded {
		kvs := resp.Responses[len(resp.Responses)-1].GetResponseRange().GetKvs()
		held = len(kvs) > 0 && kvs[0].CreateRevision == int64(token)
		resp.Responses = resp.Responses[:len(resp.Responses)-1]
		return resp, held, nil
	}
	resp.Responses = resp.Responses[1:]
	if o, keep := c.leases.keep(name, id); keep {
		c.leases.kept(name, id, o) // the key is gone already
		return resp, true, nil
	}
	if err := c.revokeBounded(ctx, id); err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return resp, true, c.mapErr(ctx, "release", err)
	}
	c.leases.forget(id)
	return resp, true, nil
}
