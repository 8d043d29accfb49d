package etcd_test

import (
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fence-dev/fence/internal/etcdtest"
	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/internal/etcdtxn"
)

// TestRelease (etcdtxn.Release): the holder's key goes in the transaction of the caller's
// operations and the next waiter gets the lock; the caller's comparisons
// failing leave the lock held and answer its Else operations; a lease no
// longer on the lock (or given with another lock's name) reports held
// false and commits nothing.
func TestRelease(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := srv.Client(t)
	p := fmt.Sprintf("/rw%d/", prefixes.Add(1))
	c := open(t, srv, p)
	l, err := c.Acquire(ctx(t), "job", coord.AcquireOptions{TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}

	// Comparisons that fail: nothing happens, the Else answers come back.
	never := clientv3.Compare(clientv3.CreateRevision(p+"marker"), "=", 42)
	resp, held, err := etcdtxn.Release(ctx(t), c, "job", l.ID, l.Token, []clientv3.Cmp{never},
		[]clientv3.Op{clientv3.OpPut(p+"marker", "x")}, []clientv3.Op{clientv3.OpGet(p + "marker")})
	if err != nil || !held || resp.Succeeded || len(resp.Responses) != 1 || resp.Responses[0].GetResponseRange() == nil {
		t.Fatalf("failed comparison: %+v, held %v, %v; want not committed, held, one Else answer", resp, held, err)
	}
	if info, err := c.Inspect(ctx(t), "job"); err != nil || !info.Held || info.Token != l.Token {
		t.Fatalf("after the failed comparison: %+v, %v; want still held", info, err)
	}

	// Another lock's name: not this lease's key; held false, nothing put.
	resp, held, err = etcdtxn.Release(ctx(t), c, "other", l.ID, l.Token, nil, []clientv3.Op{clientv3.OpPut(p+"marker", "x")}, nil)
	if err != nil || held || resp.Succeeded {
		t.Fatalf("another lock's name: %+v, held %v, %v; want not held", resp, held, err)
	}

	// A waiter, then the release with a put: one transaction.
	got := make(chan *coord.Lease, 1)
	go func() {
		w, err := open(t, srv, p).Acquire(ctx(t), "job", coord.AcquireOptions{TTL: 10 * time.Second, Wait: coord.WaitForever})
		if err != nil {
			t.Error(err)
		}
		got <- w
	}()
	waitQueued(t, c, "job")
	resp, held, err = etcdtxn.Release(ctx(t), c, "job", l.ID, l.Token, nil,
		[]clientv3.Op{clientv3.OpPut(p+"marker", "released")}, nil)
	if err != nil || !held || !resp.Succeeded || len(resp.Responses) != 1 || resp.Responses[0].GetResponsePut() == nil {
		t.Fatalf("release: %+v, held %v, %v; want committed with the put's answer only", resp, held, err)
	}
	mr, err := cli.Get(ctx(t), p+"marker")
	if err != nil || len(mr.Kvs) != 1 || mr.Kvs[0].ModRevision != resp.Header.Revision {
		t.Fatalf("marker %+v, %v; want put at the release's revision %d", mr, err, resp.Header.Revision)
	}
	w := <-got
	if w == nil || w.Token <= l.Token {
		t.Fatalf("the waiter got %+v after token %d", w, l.Token)
	}
	if ttl, err := cli.TimeToLive(ctx(t), clientv3.LeaseID(mustHex(t, l.ID))); err != nil || ttl.TTL != -1 {
		t.Fatalf("the released lease: TTL %+v, %v; want revoked", ttl, err)
	}

	// The lease already gone: held false.
	resp, held, err = etcdtxn.Release(ctx(t), c, "job", l.ID, l.Token, nil, nil, nil)
	if err != nil || held || resp.Succeeded {
		t.Fatalf("a lease released already: %+v, held %v, %v; want not held", resp, held, err)
	}
}

// waitQueued waits until lock name has a waiter.
func waitQueued(t *testing.T, c coord.Coordinator, name string) {
	t.Helper()
	deadline := time.Now().Add(guard)
	for time.Now().Before(deadline) {
		if info, err := c.Inspect(ctx(t), name); err == nil && info.Waiters > 0 {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("no waiter on %q", name)
}

func mustHex(t *testing.T, s string) int64 {
	t.Helper()
	var v int64
	if _, err := fmt.Sscanf(s, "%x", &v); err != nil {
		t.Fatal(err)
	}
	return v
}
