package etcd_test

import (
	"context"
	"testing"
	"time"

	"github.com/fence-dev/fence/internal/etcdtest"
	"github.com/fence-dev/fence/internal/faultproxy"
	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/fencing"
)

// TestHolderSurvivesDeadPaths: a holder that reaches etcd by three
// endpoints keeps its lease while one of them answers. Twice, the path
// that carries its renewals goes silent (packets dropped, the TCP
// connection never closed: a partitioned member, a dead load balancer);
// each time the dead connection must be given up and the renewals must go
// by a live path before the lease runs out.
func TestHolderSurvivesDeadPaths(t *testing.T) {
	t.Parallel()
	c, pxs := openProxied(t, etcdtest.Start(t), 3)
	const ttl = 4 * time.Second
	// The hold's context must outlive the test's phases: its parent is not
	// the test's guarded context.
	h, err := fencing.Acquire(context.Background(), c, "dead-paths", coord.AcquireOptions{TTL: ttl}, fencing.HoldOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, px := range pxs {
			px.SetMode(faultproxy.Pass)
		}
		if err := h.Release(ctx(t)); err != nil {
			t.Errorf("Release: %v", err)
		}
	}()

	dead := map[*faultproxy.Proxy]bool{}
	for round := 1; round <= 2; round++ {
		// The path the renewals take: the live proxy that forwards answers
		// while the holder renews (nothing else talks to etcd meanwhile).
		var active *faultproxy.Proxy
		for deadline := time.Now().Add(guard); active == nil; {
			before := make([]int64, len(pxs))
			for i, px := range pxs {
				before[i] = px.Forwarded()
			}
			time.Sleep(h.RenewInterval() * 3 / 2)
			for i, px := range pxs {
				if !dead[px] && px.Forwarded() > before[i] {
					if active != nil {
						active = nil // two paths moved: look again
						break
					}
					active = px
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("round %d: no single path carries the renewals", round)
			}
		}
		renewals := h.Stats().Renewals
		active.SetMode(faultproxy.BlackholeBoth)
		dead[active] = true
		select {
		case <-h.Context().Done():
			t.Fatalf("round %d: the lease was given up with %d of 3 paths dead: %v (stats %+v)",
				round, len(dead), context.Cause(h.Context()), h.Stats())
		case <-time.After(3 * ttl):
		}
		if got := h.Stats().Renewals; got <= renewals+3 {
			t.Fatalf("round %d: %d renewals in %v with a live path (%d before)", round, got-renewals, 3*ttl, renewals)
		}
	}
}
