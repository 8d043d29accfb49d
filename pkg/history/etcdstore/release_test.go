package etcdstore

import (
	"context"
	"strconv"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fence-dev/fence/internal/etcdtest"
	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/coord/etcd"
	"github.com/fence-dev/fence/pkg/history"
)

// TestReleaseInOneTransaction: the released event of a lease the Recorder
// acquired is written in the transaction that deletes the holder's key
// (etcd.Coordinator.ReleaseWith), so the next holder's turn costs the
// releaser one round trip: at the revision before the history's head
// changed, the holder's key was still there; at the head's revision it is
// gone. The lease is revoked after that transaction, and a lease revoked
// from outside before the release is still found expired.
func TestReleaseInOneTransaction(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := srv.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p := newPrefix()
	c, err := etcd.New(ctx, srv.Endpoints(), etcd.WithPrefix(p))
	if err != nil {
		t.Fatal(err)
	}
	s, err := newStore(clientOf(c))
	if err != nil {
		t.Fatal(err)
	}
	r := history.Wrap(c, s)
	defer r.Close()

	lease, err := r.Acquire(ctx, "job", coord.AcquireOptions{TTL: 10 * time.Second, Holder: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Release(ctx, "job", lease.ID); err != nil {
		t.Fatal(err)
	}
	hr, err := cli.Get(ctx, s.HeadKey("job"))
	if err != nil || len(hr.Kvs) != 1 {
		t.Fatalf("head: %v %v", hr, err)
	}
	rev := hr.Kvs[0].ModRevision
	count := func(at int64) int64 {
		resp, err := cli.Get(ctx, p+"locks/", clientv3.WithPrefix(), clientv3.WithCountOnly(), clientv3.WithRev(at))
		if err != nil {
			t.Fatal(err)
		}
		return resp.Count
	}
	before, after := count(rev-1), count(rev)
	t.Logf("history head at revision %d; keys under locks/: %d before it, %d at it", rev, before, after)
	if before != 1 || after != 0 {
		t.Fatalf("the released event and the release are not one transaction: the holder's key is there %d time(s) "+
			"at revision %d (before the head's change) and %d time(s) at revision %d (the head's), want 1 and 0",
			before, rev-1, after, rev)
	}
	evs, err := s.History(ctx, "job", 0)
	if err != nil || len(evs) != 2 || evs[1].Kind != history.Released || evs[1].Token != lease.Token || evs[1].Holder != "alice" {
		t.Fatalf("history %+v, %v; want acquired then released of token %d by alice", evs, err, lease.Token)
	}
	id := leaseID(t, lease.ID)
	if ttl, err := cli.TimeToLive(ctx, id); err != nil || ttl.TTL != -1 {
		t.Fatalf("lease %s after the release: TTL %v, %v; want it revoked", lease.ID, ttl, err)
	}

	// A lease that is gone before its release: nothing is deleted with a
	// released event, and the usual path records it expired.
	lease2, err := r.Acquire(ctx, "job", coord.AcquireOptions{TTL: 10 * time.Second, Holder: "bob"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Revoke(ctx, leaseID(t, lease2.ID)); err != nil {
		t.Fatal(err)
	}
	if err := r.Release(ctx, "job", lease2.ID); err != nil {
		t.Fatal(err)
	}
	evs, err = s.History(ctx, "job", 0)
	if err != nil || len(evs) != 4 || evs[3].Kind != history.Expired || evs[3].Token != lease2.Token {
		t.Fatalf("history %+v, %v; want the second lease's acquired then expired", evs, err)
	}
}

func leaseID(t *testing.T, s string) clientv3.LeaseID {
	v, err := strconv.ParseUint(s, 16, 63)
	if err != nil {
		t.Fatal(err)
	}
	return clientv3.LeaseID(v)
}
