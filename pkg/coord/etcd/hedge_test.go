package etcd_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fence-dev/fence/internal/etcdtest"
	"github.com/fence-dev/fence/internal/faultproxy"
	"github.com/fence-dev/fence/pkg/coord"
)

// TestRequestsGoAroundADeadPath: with one of three paths to the cluster
// silent (packets dropped, the connection left open: a frozen or cut-off
// member), every request still gets its answer within about a second: one
// that the balancer sent down the dead path is sent again through the
// others. Reads, writes and the release (revoke) alike; before the
// requests were hedged, a third of them waited until their deadline.
func TestRequestsGoAroundADeadPath(t *testing.T) {
	t.Parallel()
	c, pxs := openProxied(t, etcdtest.Start(t), 3)
	var leases []*coord.Lease
	for i := range 6 {
		leases = append(leases, acquire(t, c, "around-"+string(rune('a'+i)), coord.AcquireOptions{}))
	}
	pxs[0].SetMode(faultproxy.BlackholeBoth)
	timed := func(what string, f func(context.Context) error) {
		t.Helper()
		rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		start := time.Now()
		err := f(rctx)
		if d := time.Since(start); err != nil || d > 1500*time.Millisecond {
			t.Errorf("%s with one path dead: %v after %v", what, err, d.Round(time.Millisecond))
		}
	}
	for i := range 6 {
		timed("Inspect", func(ctx context.Context) error { _, err := c.Inspect(ctx, leases[i].Name); return err })
	}
	for _, l := range leases {
		timed("Release", func(ctx context.Context) error { return c.Release(ctx, l.Name, l.ID) })
	}
	for _, l := range leases {
		info, err := c.Inspect(ctx(t), l.Name)
		if err != nil || info.Held {
			t.Errorf("%s after its release: %+v, %v", l.Name, info, err)
		}
	}
}

// TestSilentClusterCutsShort: once no member has answered a renewal, a
// request that is not a waiter's ends within about a second even with no
// deadline of its own (what fence does after it stopped its command),
// while Acquire waits on until its own deadline.
func TestSilentClusterCutsShort(t *testing.T) {
	t.Parallel()
	c, pxs := openProxied(t, etcdtest.Start(t), 1)
	l := acquire(t, c, "silent", coord.AcquireOptions{TTL: 20 * time.Second})
	pxs[0].SetMode(faultproxy.BlackholeBoth)
	rctx, cancel := context.WithTimeout(context.Background(), 1200*time.Millisecond)
	_, err := c.Renew(rctx, l.Name, l.ID)
	cancel()
	if err == nil {
		t.Fatal("Renew through a dead path succeeded")
	}

	start := time.Now()
	done := make(chan error, 1)
	go func() { done <- c.Release(context.Background(), l.Name, l.ID) }()
	select {
	case err := <-done:
		if !errors.Is(err, coord.ErrUnavailable) {
			t.Errorf("Release on a silent cluster = %v, want ErrUnavailable", err)
		}
		if d := time.Since(start); d > time.Second {
			t.Errorf("Release on a silent cluster took %v", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Release on a silent cluster did not end within 5 s")
	}

	actx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	start = time.Now()
	_, err = c.Acquire(actx, "silent-waiter", coord.AcquireOptions{TTL: 20 * time.Second})
	if d := time.Since(start); err == nil || d < 1900*time.Millisecond {
		t.Errorf("Acquire on a silent cluster = %v after %v, want its own deadline", err, d.Round(time.Millisecond))
	}
}
