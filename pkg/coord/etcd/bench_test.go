package etcd_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/fence-dev/fence/internal/etcdtest"
	"github.com/fence-dev/fence/pkg/coord"
)

// reportLatencies reports the median and the 90th percentile of ds.
func reportLatencies(b *testing.B, ds []time.Duration, unit string) {
	if len(ds) == 0 {
		return
	}
	slices.Sort(ds)
	b.ReportMetric(float64(ds[len(ds)/2].Microseconds()), "µs-median/"+unit)
	b.ReportMetric(float64(ds[len(ds)*9/10].Microseconds()), "µs-p90/"+unit)
}

// BenchmarkAcquireRelease: one uncontended Acquire (grant and put, one
// transaction) plus Release (check and revoke).
func BenchmarkAcquireRelease(b *testing.B) {
	srv := etcdtest.Start(b)
	c := open(b, srv, "/bench/")
	ctx := context.Background()
	opts := coord.AcquireOptions{TTL: 15 * time.Second, Holder: "bench"}
	ds := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		l, err := c.Acquire(ctx, "bench", opts)
		if err != nil {
			b.Fatal(err)
		}
		if err := c.Release(ctx, l.Name, l.ID); err != nil {
			b.Fatal(err)
		}
		ds = append(ds, time.Since(start))
	}
	b.StopTimer()
	reportLatencies(b, ds, "op")
}

// BenchmarkHandoff: the time from the start of a holder's Release to the
// return of the next waiter's Acquire, with 1 and 16 waiters queued. Every
// contender has its own client; a holder re-queues after releasing, so the
// queue keeps its length.
func BenchmarkHandoff(b *testing.B) {
	for _, waiters := range []int{1, 16} {
		b.Run(fmt.Sprintf("waiters=%d", waiters), func(b *testing.B) {
			srv := etcdtest.Start(b)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var (
				mu        sync.Mutex
				releaseAt time.Time // start of the last Release, zero before the first
				ds        []time.Duration
				handoffs  int
			)
			done := make(chan struct{})
			var wg sync.WaitGroup
			opts := coord.AcquireOptions{TTL: time.Minute, Wait: coord.WaitForever}
			start := make(chan struct{})
			for i := 0; i <= waiters; i++ {
				c := open(b, srv, "/bench/")
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					for {
						l, err := c.Acquire(ctx, "handoff", opts)
						if err != nil {
							return // cancelled at the end
						}
						now := time.Now()
						mu.Lock()
						if !releaseAt.IsZero() {
							ds = append(ds, now.Sub(releaseAt))
							handoffs++
							if handoffs == b.N {
								close(done)
							}
						}
						finished := handoffs >= b.N
						releaseAt = time.Now()
						mu.Unlock()
						if finished {
							return // keep the lock: the others wait until cancelled
						}
						if err := c.Release(ctx, l.Name, l.ID); err != nil {
							return
						}
					}
				}()
			}
			// Let every contender queue first.
			first := open(b, srv, "/bench/")
			l, err := first.Acquire(ctx, "handoff", coord.AcquireOptions{TTL: time.Minute})
			if err != nil {
				b.Fatal(err)
			}
			close(start)
			for {
				info, err := first.Inspect(ctx, "handoff")
				if err != nil {
					b.Fatal(err)
				}
				if info.Waiters == waiters+1 {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
			b.ResetTimer()
			mu.Lock()
			releaseAt = time.Now()
			mu.Unlock()
			if err := first.Release(ctx, l.Name, l.ID); err != nil {
				b.Fatal(err)
			}
			select {
			case <-done:
			case <-time.After(5 * time.Minute):
				b.Fatal("handoffs did not finish")
			}
			b.StopTimer()
			cancel()
			wg.Wait()
			mu.Lock()
			defer mu.Unlock()
			reportLatencies(b, ds, "handoff")
		})
	}
}
