package shards_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/coord/local"
	"github.com/fence-dev/fence/pkg/shards"
)

// failing is a real coordinator whose acquisitions of shard locks fail with
// coord.ErrUnavailable (a fault, not a busy lock) while fail is set; it
// counts them.
type failing struct {
	coord.Coordinator
	fail     atomic.Bool
	attempts atomic.Int64
}

func (f *failing) Unwrap() coord.Coordinator { return f.Coordinator }

func (f *failing) Acquire(ctx context.Context, name string, o coord.AcquireOptions) (*coord.Lease, error) {
	if strings.Contains(name, "/shard/") {
		f.attempts.Add(1)
		if f.fail.Load() {
			return nil, fmt.Errorf("%w: injected fault", coord.ErrUnavailable)
		}
	}
	return f.Coordinator.Acquire(ctx, name, o)
}

// TestAcquireErrorRetriedAfterASecond: an acquisition of a shard that fails
// with an error other than busy is tried again at the retry, a second
// later, not at once (which spun: thousands of attempts a second against a
// coordinator in trouble). Once the fault is gone the member takes its
// shards at the next retry.
func TestAcquireErrorRetriedAfterASecond(t *testing.T) {
	lc, err := local.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Close()
	c := &failing{Coordinator: lc}
	c.fail.Store(true)
	m, err := shards.Join(context.Background(), c, "spin", 4, shards.WithMember("m1"), shards.WithTTL(5*time.Second), shards.WithSettle(-1))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Leave(context.Background())
	time.Sleep(1500 * time.Millisecond)
	n := c.attempts.Load()
	t.Logf("%d acquisitions of 4 failing shards in 1.5 s", n)
	// The first of each shard at the join, and one each at the retry a
	// second later (a slow machine may have a second retry in).
	if n > 3*4 {
		t.Errorf("%d acquisitions of 4 failing shards in 1.5 s; want each tried about once a second", n)
	}
	c.fail.Store(false)
	deadline := time.Now().Add(10 * time.Second)
	for !m.Settled() {
		if time.Now().After(deadline) {
			t.Fatalf("not settled 10 s after the fault ended: holds %d shards", len(m.Shards()))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestThawedShardTaken: a shard whose lock an operator froze (fence
// freeze: coord.Limiter) is refused to its member with a limit error (ErrBusy),
// which is busy; a thaw sends no event on the lock, so the member must look
// again by itself, and takes the shard soon after the thaw. While it is
// frozen the member reads the limits at the retry instead of asking for the
// shard every second.
func TestThawedShardTaken(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			ctx := context.Background()
			admin := b.open(t)
			lim := admin
			group := "thaw-" + b.name
			if err := lim.SetLimit(ctx, coord.Limit{Name: shards.ShardLock(group, 1), Max: 0, Reason: "test"}); err != nil {
				t.Fatal(err)
			}
			c := &failing{Coordinator: b.open(t)} // counts, fails nothing
			m, err := shards.Join(ctx, c, group, 2, shards.WithMember("m1"), shards.WithTTL(5*time.Second), shards.WithSettle(-1))
			if err != nil {
				t.Fatal(err)
			}
			defer m.Leave(ctx)
			deadline := time.Now().Add(10 * time.Second)
			for len(m.Shards()) == 0 {
				if time.Now().After(deadline) {
					t.Fatal("shard 0 (not frozen) not taken within 10 s")
				}
				time.Sleep(10 * time.Millisecond)
			}
			time.Sleep(2500 * time.Millisecond) // shard 1 is asked for, refused, and the retry comes twice
			if n := len(m.Shards()); n != 1 {
				t.Fatalf("holds %d shards while shard 1 is frozen, want 1", n)
			}
			if n := c.attempts.Load(); n != 2 {
				t.Errorf("%d acquisitions of shards in 2.5 s with shard 1 frozen; want 2 (each shard once)", n)
			}
			if _, ok, err := lim.ClearLimit(ctx, shards.ShardLock(group, 1), false); err != nil || !ok {
				t.Fatalf("thaw: %v, %v", ok, err)
			}
			t0 := time.Now()
			for !m.Settled() {
				if time.Since(t0) > 10*time.Second {
					t.Fatalf("shard 1 not taken 10 s after the thaw (holds %d)", len(m.Shards()))
				}
				time.Sleep(10 * time.Millisecond)
			}
			t.Logf("%s: shard 1 taken %v after the thaw", b.name, time.Since(t0).Round(time.Millisecond))
		})
	}
}
