package etcd_test

import (
	"context"
	"testing"
	"time"

	"github.com/fence-dev/fence/internal/etcdtest"
	"github.com/fence-dev/fence/internal/faultproxy"
	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/coord/etcd"
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
	h, err := fencing.Acquire(context.Background(), c, "dead-paths", coord.AcquireOptions{TTL: ttl})
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
			time.Sleep(h.Stats().RenewInterval * 3 / 2)
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

// TestRenewalTriesEveryPathAtOnce: a renewal whose path does not answer is
// sent again on every other path at once, not on one after another. With
// two of three paths silent, the primary among them and the live one last
// in the order of the paths, the two other paths get the renewal within
// one hedge, microseconds apart. Tried one path at a time, they got it a
// hedge delay (250 ms) apart, and the answer came after 500 ms to 1 s:
// during an election every member but one may hold a renewal, and at
// --ttl 3s that was the difference between a holder kept and a holder
// stopped.
func TestRenewalTriesEveryPathAtOnce(t *testing.T) {
	t.Parallel()
	c, pxs := openProxied(t, etcdtest.Start(t), 3)
	l := acquire(t, c, "every-path", coord.AcquireOptions{})
	only := func(live int) {
		for i, px := range pxs {
			if i == live {
				px.SetMode(faultproxy.Pass)
			} else {
				px.SetMode(faultproxy.BlackholeBoth)
			}
		}
	}
	renew := func() (time.Time, time.Duration) {
		t.Helper()
		rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		start := time.Now()
		if _, err := c.Renew(rctx, l.Name, l.ID); err != nil {
			t.Fatalf("Renew: %v", err)
		}
		return start, time.Since(start)
	}
	// Path 0 answers, so it becomes the primary.
	only(0)
	renew()
	renew()
	// Then each time the primary goes silent with the path after it, and
	// the path after that is the one that lives: 0 → 2 → 1 → 0.
	primary := 0
	for round := range 3 {
		live := (primary + 2) % 3
		next := (primary + 1) % 3
		only(live)
		start, took := renew()
		sends := etcd.LaneLastSends(c)
		if sends[next].Before(start) || sends[live].Before(start) {
			t.Fatalf("round %d: the renewal (%v) was not sent on paths %d and %d: %v", round, took, next, live, sends)
		}
		if gap := sends[live].Sub(sends[next]).Abs(); gap > 100*time.Millisecond {
			t.Errorf("round %d: the renewal reached path %d %v after path %d (answered after %v): the other paths were tried one after another",
				round, live, gap.Round(time.Millisecond), next, took)
		}
		primary = live
	}
	for _, px := range pxs {
		px.SetMode(faultproxy.Pass)
	}
}
