//go:build linux

package supervise_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fence-dev/fence/internal/exitcode"
	"github.com/fence-dev/fence/internal/supervise"
	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/fencing"
)

// stalling is a fault: its renewals of one lock fail once stall is set
// (the coordinator stops answering for that lease only). Everything else
// is the real coordinator's.
type stalling struct {
	coord.Coordinator
	lock  string
	stall atomic.Bool
}

func (s *stalling) Renew(ctx context.Context, name, leaseID string) (coord.Renewal, error) {
	if name == s.lock && s.stall.Load() {
		return coord.Renewal{}, coord.ErrUnavailable
	}
	return s.Coordinator.Renew(ctx, name, leaseID)
}

// TestHeldSetEarliest: a command runs under two leases the caller holds
// (Options.Holds, as fence shards run does); one of them stops being
// renewed while the other stays healthy. The command, which ignores TERM,
// must be dead before the stalled lease can expire on the coordinator (its
// last Sent + TTL), however far the healthy one reaches, and
// fence exits 76 naming the stalled lock. A HeldSet that followed the latest
// safe-until would let the command run past it (stopped only when the hold
// itself ends, at safe-until, then the grace).
func TestHeldSetEarliest(t *testing.T) {
	b := localBackend(t)
	c := &stalling{Coordinator: b.c, lock: "pair/b"}
	const ttl = 3 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), hang)
	defer cancel()
	var cur atomic.Pointer[supervise.HeldSet]
	hopts := fencing.OnRenewal(func(_ *fencing.Held, err error) {
		if s := cur.Load(); s != nil && err == nil {
			s.Renewed()
		}
	})
	var helds []*fencing.Held
	for _, name := range []string{"pair/a", "pair/b"} {
		h, err := fencing.Acquire(ctx, c, name, coord.AcquireOptions{TTL: ttl, Wait: 0, Holder: "heldset-test"}, hopts)
		if err != nil {
			t.Fatal(err)
		}
		defer h.Release(context.Background())
		helds = append(helds, h)
	}
	stalled := helds[1]
	hs := supervise.NewHeldSet(helds, map[string]string{"FENCE_SHARDS": "0,1"})
	defer hs.Close()
	cur.Store(hs)

	pidFile := tempPath(t, "pid")
	type result struct {
		code int
		err  error
	}
	res := make(chan result, 1)
	go func() {
		code, err := run(t, b, supervise.Options{Lock: "pair", TTL: ttl, Holds: hs, Shell: true,
			Command: []string{"trap '' TERM; echo $$ > " + shell(pidFile) + "; while :; do sleep 0.05; done"}})
		res <- result{code, err}
	}()
	death := watchDeath(t, pids(t, waitFile(t, pidFile, 1))[0])
	time.Sleep(ttl / 2) // both renewed at least once
	c.stall.Store(true)
	died := death.wait(t)
	r := <-res
	// No renewal of b was acknowledged after the stall: its last safe-until.
	su, healthy := stalled.Stats().SafeUntilBoot, helds[0].Stats().SafeUntilBoot
	// The stalled lease lives at least until su + margin (Sent + TTL).
	expiry := su.Add(stalled.Stats().Margin)
	t.Logf("the command (ignoring TERM) died %v before the stalled lease could expire; the healthy one's safe-until reaches %v past it",
		expiry.Sub(died).Round(time.Millisecond), healthy.Sub(su).Round(time.Millisecond))
	if died >= expiry {
		t.Errorf("the command died %v after the stalled lease could expire", died.Sub(expiry).Round(time.Millisecond))
	}
	if context.Cause(helds[0].Context()) != nil {
		t.Errorf("the healthy lease ended: %v", context.Cause(helds[0].Context()))
	}
	if healthy <= su {
		t.Errorf("the healthy lease's safe-until %v is not past the stalled one's %v: the test proves nothing", healthy, su)
	}
	if r.code != exitcode.LeaseLost || r.err == nil || !strings.Contains(r.err.Error(), `"pair/b"`) {
		t.Fatalf("run: %d, %v; want %d and a loss of pair/b", r.code, r.err, exitcode.LeaseLost)
	}
}
