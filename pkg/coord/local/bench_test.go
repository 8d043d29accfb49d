package local

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fence-dev/fence/pkg/coord"
)

// BenchmarkAcquireRelease measures one uncontended Acquire plus Release on
// the test's file system: the grant replaces the state (one fsync; two for
// the grant that starts a block of reserved tokens), the release overwrites
// the lease record (no fsync). It reports the median as median-ns/op besides
// the mean.
func BenchmarkAcquireRelease(b *testing.B) {
	c := openTB(b, filepath.Join(b.TempDir(), "state"))
	ctx := context.Background()
	opts := coord.AcquireOptions{TTL: time.Minute, Holder: "bench", Wait: 0}
	times := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		l, err := c.Acquire(ctx, "bench", opts)
		if err != nil {
			b.Fatal(err)
		}
		if err := c.Release(ctx, l.Name, l.ID); err != nil {
			b.Fatal(err)
		}
		times = append(times, time.Since(t0))
	}
	b.StopTimer()
	reportMedian(b, "median-ns/op", times)
}

// BenchmarkHandoff measures the handoff latency: from the start of a
// holder's Release to the next waiter holding the lock, with 1 and 16
// waiters always queued (each a goroutine with its own coordinator, as
// separate processes would have).
func BenchmarkHandoff(b *testing.B) {
	for _, waiters := range []int{1, 16} {
		b.Run(fmt.Sprintf("waiters=%d", waiters), func(b *testing.B) { benchHandoff(b, waiters) })
	}
}

func benchHandoff(b *testing.B, waiters int) {
	dir := filepath.Join(b.TempDir(), "state")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var (
		mu       sync.Mutex
		samples  []time.Duration
		released atomic.Int64 // UnixNano of the last Release start, 0 before the first
		left     atomic.Int64
	)
	left.Store(int64(b.N))
	opts := coord.AcquireOptions{TTL: time.Minute, Holder: "bench", Wait: coord.WaitForever}
	// The first holder takes the lock before the waiters queue.
	first := openTB(b, dir)
	l0, err := first.Acquire(ctx, "handoff", opts)
	if err != nil {
		b.Fatal(err)
	}
	var queued sync.WaitGroup
	var wg sync.WaitGroup
	errs := make(chan error, waiters+1)
	b.ResetTimer()
	for i := 0; i <= waiters; i++ {
		c := first
		if i > 0 {
			c = openTB(b, dir)
		}
		wg.Add(1)
		queued.Add(1)
		go func() {
			defer wg.Done()
			held := i == 0
			l := l0
			if !held {
				o := opts
				once := sync.OnceFunc(queued.Done)
				o.OnWait = func(coord.LockInfo) { once() }
				defer once()
				var err error
				if l, err = c.Acquire(ctx, "handoff", o); err != nil {
					errs <- err
					return
				}
			} else {
				queued.Done()
				queued.Wait() // everyone queued before the first release
			}
			for {
				if !held {
					if r := released.Load(); r != 0 {
						mu.Lock()
						samples = append(samples, time.Since(time.Unix(0, r)))
						mu.Unlock()
					}
				}
				held = false
				n := left.Add(-1)
				released.Store(time.Now().UnixNano())
				if err := c.Release(ctx, l.Name, l.ID); err != nil {
					errs <- err
					return
				}
				if n < 0 {
					return
				}
				o := opts
				var err error
				if l, err = c.Acquire(ctx, "handoff", o); err != nil {
					errs <- err
					return
				}
				if left.Load() < -int64(waiters) {
					_ = c.Release(ctx, l.Name, l.ID)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	reportMedian(b, "median-handoff-ns", samples)
}

func reportMedian(b *testing.B, unit string, d []time.Duration) {
	if len(d) == 0 {
		return
	}
	slices.Sort(d)
	b.ReportMetric(float64(d[len(d)/2].Nanoseconds()), unit)
	b.ReportMetric(float64(d[len(d)*99/100].Nanoseconds()), "p99-"+unit)
}

func openTB(tb testing.TB, dir string) *coordinator {
	tb.Helper()
	c, err := open(dir)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	return c
}

// BenchmarkRenew measures one Renew of a held lease (no process attached),
// the work a holder does every TTL/3 for each of its leases. It reports the
// median as median-ns/op besides the mean.
func BenchmarkRenew(b *testing.B) {
	c := openTB(b, filepath.Join(b.TempDir(), "state"))
	ctx := context.Background()
	l, err := c.Acquire(ctx, "bench", coord.AcquireOptions{TTL: time.Minute, Holder: "bench", Wait: 0})
	if err != nil {
		b.Fatal(err)
	}
	times := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		if _, err := c.Renew(ctx, l.Name, l.ID); err != nil {
			b.Fatal(err)
		}
		times = append(times, time.Since(t0))
	}
	b.StopTimer()
	reportMedian(b, "median-ns/op", times)
}
