// Package etcdtxn is the seam between the etcd backend (pkg/coord/etcd)
// and its history store (pkg/history/etcdstore): the store writes a
// lease's released event in the transaction that releases the lease, so
// that the event is on record before the next holder's turn at the cost of
// one round trip. Nothing of it is part of either package's API.
package etcdtxn

import (
	"context"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Release releases lease leaseID of lock name, held under token, on c (a
// coordinator of package etcd), and commits then in the same transaction: one
// transaction deletes the holder's key and runs then, if the key is still
// the one the lease put on the lock with token as its create revision and
// cmps hold. The lease itself is revoked after the transaction.
//
// When the transaction does not commit, nothing is released: held reports
// whether the lease still holds the lock, and resp holds the answers of
// els. A committed resp holds the answers of then. err after a committed
// transaction is the failure to end the lease (the lock is released).
//
// Package etcd sets it when it is initialised.
var Release func(ctx context.Context, c any, name, leaseID string, token uint64, cmps []clientv3.Cmp, then, els []clientv3.Op) (resp *clientv3.TxnResponse, held bool, err error)
