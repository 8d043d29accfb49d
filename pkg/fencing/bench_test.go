package fencing_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/fencing"
)

// instant renews every lease at once (no backend): what a hold costs beyond
// its coordinator.
type instant struct {
	coord.Coordinator
	renewals atomic.Int64
}

func (c *instant) Renew(context.Context, string, string) (coord.Renewal, error) {
	c.renewals.Add(1)
	return coord.Renewal{TTL: time.Second}, nil
}

func (c *instant) Release(context.Context, string, string) error { return nil }

func cpuTime() time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		panic(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkHolds holds 1000 leases of 1s (a renewal every 333ms each, 3000
// a second) on a coordinator that answers at once, and reports the CPU
// time of the process per renewal (cpu-ns/renewal): the cost of holding
// itself, scheduling and applying the answers. An op is one renewal; the
// wall time per op only says how fast renewals fall due.
func BenchmarkHolds(b *testing.B) {
	c := &instant{}
	benchHolds(b, c, &c.renewals)
}

func benchHolds(b *testing.B, c coord.Coordinator, renewals *atomic.Int64) {
	ctx := context.Background()
	var helds []*fencing.Held
	for i := range 1000 {
		l := &coord.Lease{Name: fmt.Sprintf("l%d", i), ID: fmt.Sprint(i), TTL: time.Second, Sent: time.Now()}
		h, err := fencing.Hold(ctx, c, l, fencing.Opts(fencing.HoldOptions{}))
		if err != nil {
			b.Fatal(err)
		}
		helds = append(helds, h)
		time.Sleep(333 * time.Microsecond) // spread over one interval
	}
	defer func() {
		for _, h := range helds {
			h.Release(ctx)
		}
	}()
	b.ResetTimer()
	r0, cpu0 := renewals.Load(), cpuTime()
	for renewals.Load()-r0 < int64(b.N) {
		time.Sleep(10 * time.Millisecond)
	}
	b.StopTimer()
	n := renewals.Load() - r0
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(n), "cpu-ns/renewal")
	for _, h := range helds {
		if err := context.Cause(h.Context()); err != nil {
			b.Fatalf("hold ended: %v", err)
		}
	}
}
