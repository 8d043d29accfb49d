package etcd

import (
	"context"
	"fmt"
	"slices"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/internal/etcdtxn"
)

func init() {
	etcdtxn.Release = func(ctx context.Context, c any, name, leaseID string, token uint64, cmps []clientv3.Cmp, then, els []clientv3.Op) (*clientv3.TxnResponse, bool, error) {
		ec, ok := c.(*coordinator)
		if !ok {
			return nil, false, fmt.Errorf("%w: etcdtxn.Release on %T", coord.ErrInvalid, c)
		}
		return ec.releaseWith(ctx, name, leaseID, token, cmps, then, els)
	}
}

// releaseWith is etcdtxn.Release: the holder's key is deleted in one
// transaction with the caller's operations (the history's released
// event), and the lease is revoked after it, off the handoff's path.
func (c *coordinator) releaseWith(ctx context.Context, name, leaseID string, token uint64, cmps []clientv3.Cmp, then, els []clientv3.Op) (resp *clientv3.TxnResponse, held bool, err error) {
	id, err := c.checkLease(name, leaseID)
	if err != nil {
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
	if err := c.revokeBounded(ctx, id); err != nil {
		return resp, true, c.mapErr(ctx, "release", err)
	}
	c.leases.forget(id)
	return resp, true, nil
}
