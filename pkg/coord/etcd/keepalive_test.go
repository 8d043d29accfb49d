package etcd_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fence-dev/fence/internal/etcdtest"
	"github.com/fence-dev/fence/internal/faultproxy"
	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/coord/etcd"
)

// keepAliveStreams reads, from the embedded server's own gRPC metrics, how
// many LeaseKeepAlive streams have been opened in this test binary.
func keepAliveStreams(t *testing.T) float64 {
	t.Helper()
	mfs, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := 0.0
	for _, mf := range mfs {
		if mf.GetName() != "grpc_server_started_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "grpc_method" && lp.GetValue() == "LeaseKeepAlive" {
					n += m.GetCounter().GetValue()
				}
			}
		}
	}
	return n
}

// TestRenewSharesOneStream: many leases renewed at once by one coordinator
// each get their own answer (Sent before it, the granted TTL), over one
// LeaseKeepAlive stream: the server counts the streams opened.
//
// Not parallel: it counts streams server-wide.
func TestRenewSharesOneStream(t *testing.T) {
	srv := etcdtest.Start(t)
	c := open(t, srv, "/renew-stream/")
	const n = 200
	leases := make([]*coord.Lease, n)
	for i := range leases {
		leases[i] = acquire(t, c, fmt.Sprintf("l%d", i), coord.AcquireOptions{TTL: 20 * time.Second})
	}
	before := keepAliveStreams(t)
	var wg sync.WaitGroup
	errs := make(chan error, 3*n)
	for round := 0; round < 3; round++ {
		for _, l := range leases {
			wg.Add(1)
			go func() {
				defer wg.Done()
				start := time.Now()
				r, err := c.Renew(ctx(t), l.Name, l.ID)
				switch {
				case err != nil:
					errs <- fmt.Errorf("Renew(%s): %w", l.Name, err)
				case r.Sent.Before(start) || r.Sent.After(time.Now()):
					errs <- fmt.Errorf("Renew(%s): Sent %v outside the call", l.Name, r.Sent)
				case r.TTL != 20*time.Second:
					errs <- fmt.Errorf("Renew(%s): TTL %v", l.Name, r.TTL)
				}
			}()
		}
		wg.Wait()
	}
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if opened := keepAliveStreams(t) - before; opened != 1 {
		t.Errorf("%d renewals opened %v keep-alive streams, want 1", 3*n, opened)
	}
	// A lease the server no longer has is lost, not an error to retry.
	if _, err := c.Client().Revoke(ctx(t), mustID(t, leases[0].ID)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Renew(ctx(t), leases[0].Name, leases[0].ID); !errors.Is(err, coord.ErrLeaseLost) {
		t.Errorf("Renew of a revoked lease = %v, want ErrLeaseLost", err)
	}
}

// TestRenewRecoversFromPartition: renewals through a connection that
// blackholes fail within the caller's deadline, and succeed again once the
// network heals (the stuck stream is dropped and a new one opened).
func TestRenewRecoversFromPartition(t *testing.T) {
	t.Parallel()
	c, pxs := openProxied(t, etcdtest.Start(t), 1)
	px := pxs[0]
	l := acquire(t, c, "p", coord.AcquireOptions{TTL: 20 * time.Second})
	if _, err := c.Renew(ctx(t), l.Name, l.ID); err != nil {
		t.Fatal(err)
	}

	px.SetMode(faultproxy.BlackholeBoth)
	for i := 0; i < 2; i++ {
		rctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		_, err := c.Renew(rctx, l.Name, l.ID)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Renew while blackholed = %v, want the deadline", err)
		}
	}

	px.SetMode(faultproxy.Pass)
	deadline := time.Now().Add(guard / 2)
	for {
		rctx, cancel := context.WithTimeout(context.Background(), time.Second)
		r, err := c.Renew(rctx, l.Name, l.ID)
		cancel()
		if err == nil {
			if r.TTL != 20*time.Second {
				t.Errorf("TTL %v after the partition", r.TTL)
			}
			break
		}
		if errors.Is(err, coord.ErrLeaseLost) || time.Now().After(deadline) {
			t.Fatalf("Renew after the partition healed = %v", err)
		}
	}
}

// TestLeasesInALoop: a coordinator that acquires a lock in a loop grants
// a lease per holding and revokes it on Release: every holding has a
// larger token and a fresh Sent, the lock is free after each Release, and
// no lease is left behind.
func TestLeasesInALoop(t *testing.T) {
	t.Parallel()
	srv := etcdtest.Start(t)
	cli := srv.Client(t)
	leaseCount := func() int {
		t.Helper()
		resp, err := cli.Leases(ctx(t))
		if err != nil {
			t.Fatal(err)
		}
		return len(resp.Leases)
	}

	once := open(t, srv, "/kept/")
	l := acquire(t, once, "one-shot", coord.AcquireOptions{TTL: 20 * time.Second})
	release(t, once, l)
	if n := leaseCount(); n != 0 {
		t.Errorf("after one acquisition and its release, %d leases on the server, want 0", n)
	}

	c, err := etcd.New(ctx(t), srv.Endpoints(), etcd.WithPrefix("/kept/"))
	if err != nil {
		t.Fatal(err)
	}
	other := open(t, srv, "/kept/")
	ids := map[string]int{}
	var last uint64
	for i := 0; i < 20; i++ {
		l = acquire(t, c, "loop", coord.AcquireOptions{TTL: 20 * time.Second})
		ids[l.ID]++
		if l.Token <= last {
			t.Errorf("acquisition %d: token %d after %d", i, l.Token, last)
		}
		last = l.Token
		if age := time.Since(l.Sent); age > l.TTL/10 {
			t.Errorf("acquisition %d: Sent %v ago", i, age)
		}
		if info := inspect(t, other, "loop"); !info.Held || info.Token != l.Token || info.LeaseID != l.ID {
			t.Errorf("acquisition %d: the lock reads %+v, want held with token %d, lease %s", i, info, l.Token, l.ID)
		}
		release(t, c, l)
		if info := inspect(t, other, "loop"); info.Held {
			t.Errorf("after release %d, the lock reads held: %+v", i, info)
		}
	}
	if len(ids) != 20 {
		t.Errorf("20 acquisitions used leases %v, want one each", ids)
	}
	if n := leaseCount(); n != 0 {
		t.Errorf("after the loop, %d leases on the server, want 0", n)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if n := leaseCount(); n != 0 {
		t.Errorf("after Close, %d leases on the server, want 0", n)
	}
}

func inspect(t *testing.T, c coord.Coordinator, name string) coord.LockInfo {
	t.Helper()
	info, err := c.Inspect(ctx(t), name)
	if err != nil {
		t.Fatal(err)
	}
	return info
}

// mustID parses a lease id as the backend formats it (hexadecimal).
func mustID(t *testing.T, id string) clientv3.LeaseID {
	t.Helper()
	v, err := strconv.ParseUint(id, 16, 64)
	if err != nil {
		t.Fatal(err)
	}
	return clientv3.LeaseID(v)
}
