// Package contended holds the contended-throughput benchmark of
// docs/benchmarks.md: N goroutines, each with its own etcd client, loop over
// acquire, one guarded write, release on one lock, through fence's Go API
// (pkg/fencing on the etcd coordinator) and through etcd's own
// concurrency.Mutex, with the same guarded write (pkg/guard/etcdstore).
//
// The harness (bench/run) points it at its etcd server with
// FENCE_BENCH_ENDPOINTS; run alone, it starts an embedded etcd:
//
//	go test ./bench/contended -run '^$' -bench . -benchtime 2s
//
// FENCE_BENCH_ROUNDS runs that many rounds of every loop side by side, as
// the harness does (see BenchmarkContended).
//
// Every loop also checks that the lock is exclusive (no two goroutines
// inside at once) and that no guarded write is refused: a benchmark that
// broke safety would fail rather than report a fast figure.
package contended

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"

	"github.com/fence-dev/fence/internal/etcdtest"
	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/coord/etcd"
	"github.com/fence-dev/fence/pkg/fencing"
	"github.com/fence-dev/fence/pkg/guard/etcdstore"
)

// EnvEndpoints names the etcd endpoints to use (comma-separated); when it is
// empty the benchmark starts an embedded etcd.
const EnvEndpoints = "FENCE_BENCH_ENDPOINTS"

// ttl is the lease TTL of both loops (fence run's default; etcdctl lock's
// is 10s, concurrency.NewSession's 60s: it does not matter while no lease
// expires).
const ttl = 15 * time.Second

// Workers is the set of goroutine counts the benchmark runs.
var Workers = []int{1, 4, 16}

// worker is one goroutine's side of a loop: its own client and state.
type worker interface {
	// op acquires, calls inside with the fencing token, and releases.
	op(ctx context.Context, inside func(token uint64) error) error
	close()
}

type impl struct {
	name string
	new  func(ctx context.Context, endpoints []string, prefix string, i int) (worker, error)
}

// impls are the loops compared. "mutex" is the idiom: one session (one
// lease) per worker, kept across acquisitions. "mutex-session-per-op" takes
// a fresh lease per acquisition, as fence does (each fence lease has its
// own TTL and safe-until): it shows how much of the gap is that lease.
var impls = []impl{
	{"fence", newFence},
	{"mutex", newMutex(false)},
	{"mutex-session-per-op", newMutex(true)},
}

var valueBytes = []byte("payload written under the lock")

// --- fence: fencing.Acquire / guard Put / Held.Release -------------------

type fenceWorker struct {
	c      coord.Coordinator
	closer func() error
	holder string
}

func newFence(ctx context.Context, endpoints []string, prefix string, i int) (worker, error) {
	c, err := etcd.New(ctx, endpoints, etcd.WithPrefix(prefix), etcd.WithDialTimeout(10*time.Second))
	if err != nil {
		return nil, err
	}
	return &fenceWorker{c: c, closer: c.Close, holder: fmt.Sprintf("bench-%d", i)}, nil
}

func (w *fenceWorker) op(ctx context.Context, inside func(uint64) error) error {
	h, err := fencing.Acquire(ctx, w.c, "contended",
		coord.AcquireOptions{TTL: ttl, Holder: w.holder, Wait: coord.WaitForever})
	if err != nil {
		return fmt.Errorf("acquire: %w", err)
	}
	ierr := inside(h.Token())
	if err := h.Release(ctx); err != nil {
		return err
	}
	return ierr
}

func (w *fenceWorker) close() { w.closer() }

// --- etcd: concurrency.Mutex / guard Put / Unlock ------------------------

type mutexWorker struct {
	cli     *clientv3.Client
	s       *concurrency.Session // nil when a session is taken per op
	prefix  string
	perOpSe bool
}

func newMutex(perOp bool) func(context.Context, []string, string, int) (worker, error) {
	return func(ctx context.Context, endpoints []string, prefix string, _ int) (worker, error) {
		cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			return nil, err
		}
		w := &mutexWorker{cli: cli, prefix: prefix, perOpSe: perOp}
		if !perOp {
			if w.s, err = concurrency.NewSession(cli, concurrency.WithTTL(int(ttl/time.Second))); err != nil {
				cli.Close()
				return nil, err
			}
		}
		return w, nil
	}
}

func (w *mutexWorker) op(ctx context.Context, inside func(uint64) error) error {
	s := w.s
	if w.perOpSe {
		var err error
		if s, err = concurrency.NewSession(w.cli, concurrency.WithTTL(int(ttl/time.Second))); err != nil {
			return err
		}
		defer s.Close()
	}
	m := concurrency.NewMutex(s, w.prefix+"mutex/contended")
	if err := m.Lock(ctx); err != nil {
		return fmt.Errorf("lock: %w", err)
	}
	// The revision at which Lock returned grows from one holder to the
	// next: it serves as the fencing token.
	ierr := inside(uint64(m.Header().Revision))
	if err := m.Unlock(ctx); err != nil {
		return err
	}
	return ierr
}

func (w *mutexWorker) close() {
	if w.s != nil {
		w.s.Close()
	}
	w.cli.Close()
}

// --- the loop ------------------------------------------------------------

var runID atomic.Int64

// loop runs ops acquisitions of one lock spread over n workers of im and
// returns the time they took (worker set-up excluded).
func loop(tb testing.TB, endpoints []string, im impl, n, ops int, onStart func()) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	prefix := fmt.Sprintf("/bench-contended/%d-%d/%s/", os.Getpid(), runID.Add(1), im.name)
	ws := make([]worker, n)
	for i := range ws {
		w, err := im.new(ctx, endpoints, prefix, i)
		if err != nil {
			for _, w := range ws[:i] {
				w.close()
			}
			return 0, err
		}
		ws[i] = w
	}
	defer func() {
		for _, w := range ws {
			w.close()
		}
	}()
	// The guarded write goes through a store of its own client, shared by
	// the workers of this loop, as the protected storage would be.
	gcli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return 0, err
	}
	defer gcli.Close()
	g := etcdstore.New(gcli, prefix)
	return runWorkers(ctx, cancel, ws, ops, onStart, func(ctx context.Context, token uint64) error {
		return g.Put(ctx, "contended", token, valueBytes)
	})
}

// runWorkers runs ops acquisitions over ws, each with one guarded write
// (put), checking that no two workers are inside at once, and returns the
// time they took. cancel stops the others after a failure.
func runWorkers(ctx context.Context, cancel func(), ws []worker, ops int, onStart func(), put func(context.Context, uint64) error) (time.Duration, error) {
	var (
		next   atomic.Int64
		in     atomic.Int32
		wg     sync.WaitGroup
		mu     sync.Mutex
		firstE error
	)
	inside := func(token uint64) error {
		if k := in.Add(1); k != 1 {
			return fmt.Errorf("%d holders inside the lock at once", k)
		}
		defer in.Add(-1)
		if err := put(ctx, token); err != nil {
			return fmt.Errorf("guarded write with token %d: %w", token, err)
		}
		return nil
	}
	if onStart != nil {
		onStart()
	}
	start := time.Now()
	for _, w := range ws {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(ops) {
				if err := w.op(ctx, inside); err != nil {
					mu.Lock()
					if firstE == nil {
						firstE = err
					}
					mu.Unlock()
					next.Store(int64(ops)) // stop the others
					cancel()
					return
				}
			}
		}()
	}
	wg.Wait()
	return time.Since(start), firstE
}

func endpoints(tb testing.TB) []string {
	if e := os.Getenv(EnvEndpoints); e != "" {
		return strings.Split(e, ",")
	}
	return etcdtest.Start(tb).Endpoints()
}

// EnvRounds is how many rounds BenchmarkContended runs (1 when empty).
const EnvRounds = "FENCE_BENCH_ROUNDS"

// BenchmarkContended reports ops/s: acquisitions (each with one guarded
// write) per second over all workers.
//
// A round runs every loop once at each N; the loops of one N run one after
// the other, in an order that is reversed from one round to the next. The
// shared machine's load, which changes over seconds, then weighs alike on
// both sides of a ratio. Rounds replace -count, which runs each
// sub-benchmark its count times in a row: fence's runs at one N then came
// tens of seconds before mutex's, and the ratio at one goroutine swung from
// 0.64x to 1.06x between runs of the same code. From the second round on,
// go test names a result "...#01", "...#02".
func BenchmarkContended(b *testing.B) {
	eps := endpoints(b)
	runRounds(b, impls, func(im impl) string { return im.name }, func(b *testing.B, im impl, n int) (time.Duration, error) {
		return loop(b, eps, im, n, b.N, b.ResetTimer)
	})
}

// runRounds runs each of impls at each of Workers in sub-benchmarks, for
// EnvRounds rounds (default 1), the order of impls reversed from one round
// to the next, and reports each run's throughput in ops/s.
func runRounds[T any](b *testing.B, impls []T, name func(T) string, run func(b *testing.B, im T, n int) (time.Duration, error)) {
	rounds := 1
	if s := os.Getenv(EnvRounds); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			b.Fatalf("%s=%q: want a number of rounds, 1 or more", EnvRounds, s)
		}
		rounds = n
	}
	for r := range rounds {
		order := slices.Clone(impls)
		if r%2 == 1 {
			slices.Reverse(order)
		}
		for _, n := range Workers {
			for _, im := range order {
				b.Run(fmt.Sprintf("impl=%s/workers=%d", name(im), n), func(b *testing.B) {
					d, err := run(b, im, n)
					b.StopTimer()
					if err != nil {
						b.Fatal(err)
					}
					b.ReportMetric(float64(b.N)/d.Seconds(), "ops/s")
				})
			}
		}
	}
}

// TestLoops runs every loop briefly, so that `go test ./...` notices a
// broken benchmark.
func TestLoops(t *testing.T) {
	eps := endpoints(t)
	for _, im := range impls {
		t.Run(im.name, func(t *testing.T) {
			if _, err := loop(t, eps, im, 3, 12, nil); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestLoopReportsUnsafety checks that a violation is reported: a guarded
// write with a token below the one accepted fails the loop.
func TestLoopReportsUnsafety(t *testing.T) {
	eps := endpoints(t)
	stale := impl{"stale", func(ctx context.Context, e []string, p string, i int) (worker, error) {
		return &staleWorker{next: 3}, nil
	}}
	_, err := loop(t, eps, stale, 1, 3, nil)
	if err == nil || !strings.Contains(err.Error(), "stale") {
		t.Fatalf("loop with decreasing tokens returned %v, want a stale-token error", err)
	}
}

// staleWorker writes with tokens that go down: 3, 2, 1.
type staleWorker struct{ next uint64 }

func (w *staleWorker) op(ctx context.Context, inside func(uint64) error) error {
	w.next--
	return inside(w.next + 1)
}
func (*staleWorker) close() {}
