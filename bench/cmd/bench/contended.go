package main

import (
	"context"
	"fmt"

	"github.com/fence-dev/fence/bench/internal/stats"
)

// Loops of bench/contended.
const (
	implFence      = "fence"
	implMutex      = "mutex"
	implMutexPerOp = "mutex-session-per-op"
)

// runContended is section 3: the Go benchmark bench/contended against the
// harness's etcd server.
func runContended(ctx context.Context, cfg *config, srv *etcdServer, res *Results) error {
	// Rounds (bench/contended: every loop at each N, side by side, the
	// order reversed from one round to the next), not -count.
	benchtime, rounds := "1500ms", 6
	if cfg.smoke {
		benchtime, rounds = "4x", 2
	}
	c := &res.Contended
	c.Workers, c.Impls = []int{1, 4, 16}, []string{implFence, implMutex, implMutexPerOp}
	c.Count, c.Benchtime = rounds, benchtime
	c.Ops = map[string][]Measure{}
	ls, err := goBench(ctx, cfg, "contended", "./bench/contended", "^BenchmarkContended$", benchtime, 1,
		"FENCE_BENCH_ENDPOINTS="+srv.endpoint, fmt.Sprintf("FENCE_BENCH_ROUNDS=%d", rounds))
	if err != nil {
		return err
	}
	for _, im := range c.Impls {
		for _, n := range c.Workers {
			name := fmt.Sprintf("BenchmarkContended/impl=%s/workers=%d", im, n)
			var xs []float64
			for _, l := range ls {
				if l.Name == name {
					xs = append(xs, l.Metrics["ops/s"])
				}
			}
			if len(xs) == 0 {
				return fmt.Errorf("no result for %s", name)
			}
			c.Ops[im] = append(c.Ops[im], Measure{Name: fmt.Sprintf("%s, %d goroutines", im, n), Unit: "ops/s", S: stats.Of(xs)})
		}
	}
	return nil
}
