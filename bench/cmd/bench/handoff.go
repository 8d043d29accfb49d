package main

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/sys/unix"

	"github.com/fence-dev/fence/bench/internal/stats"
	"github.com/fence-dev/fence/internal/clock"
	"github.com/fence-dev/fence/pkg/coord/local"
)

// Tools of the handoff section.
const (
	toolFenceEtcd  = "fence (etcd)"
	toolEtcdctl    = "etcdctl lock"
	toolFenceLocal = "fence (local)"
	toolFlock      = "flock"
)

// lockTool runs a command under a lock and tells how many processes hold
// or wait for a lock.
type lockTool struct {
	name   string
	argv   func(lock string, cmd ...string) []string
	queued func(ctx context.Context, lock string) (int, error)
}

// runHandoff is section 2. For each tool and waiter count N, a holder's
// command (a stamp that waits on a FIFO) holds the lock while N waiters
// queue behind it, each to run a stamp that ends at once. Releasing the
// holder starts the chain; every stamp writes its start and end on the
// boot clock, and each handoff is the gap from one command's end to the
// next command's start. The chain also checks exclusion: a start before
// the previous end fails the section.
func runHandoff(ctx context.Context, cfg *config, srv *etcdServer, res *Results) error {
	cli, err := srv.client()
	if err != nil {
		return err
	}
	defer cli.Close()
	lc, err := local.Open(localState(cfg))
	if err != nil {
		return err
	}
	defer lc.Close()
	countPrefix := func(keyOf func(string) string) func(context.Context, string) (int, error) {
		return func(ctx context.Context, lock string) (int, error) {
			r, err := cli.Get(ctx, keyOf(lock), clientv3.WithPrefix(), clientv3.WithCountOnly())
			if err != nil {
				return 0, err
			}
			return int(r.Count), nil
		}
	}
	tools := []lockTool{
		{toolFenceEtcd, func(l string, c ...string) []string { return fenceEtcdArgv(cfg, srv, l, c...) },
			countPrefix(func(l string) string { return "/fence/locks/" + url.PathEscape(l) + "/" })},
		{toolEtcdctl, func(l string, c ...string) []string { return etcdctlArgv(cfg, srv, l, c...) },
			countPrefix(func(l string) string { return l + "/" })},
		{toolFenceLocal, func(l string, c ...string) []string { return fenceLocalArgv(cfg, l, c...) },
			func(ctx context.Context, l string) (int, error) {
				info, err := lc.Inspect(ctx, l)
				if err != nil {
					return 0, err
				}
				n := info.Waiters
				if info.Held {
					n++
				}
				return n, nil
			}},
		{toolFlock, func(l string, c ...string) []string { return flockArgv(cfg, l, c...) },
			func(ctx context.Context, l string) (int, error) {
				return flockCount(filepath.Join(cfg.work, "flock-"+l))
			}},
	}
	waiters := []int{1, 4, 16, 32}
	if cfg.smoke {
		waiters = []int{1, 4}
	}
	res.Handoff.Waiters = waiters
	res.Handoff.Gaps = map[string][]Measure{}
	dir := filepath.Join(cfg.work, "handoff")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, t := range tools {
		res.Handoff.Tools = append(res.Handoff.Tools, t.name)
		for _, n := range waiters {
			// Rounds enough for about 48 handoffs (n per round), at least 2.
			rounds := max(2, (48+n-1)/n)
			if cfg.smoke {
				rounds = 1
			}
			var gaps []float64
			for r := 0; r < rounds; r++ {
				g, err := handoffRound(ctx, cfg, dir, t, n, r)
				if err != nil {
					return fmt.Errorf("%s, %d waiters, round %d: %w", t.name, n, r, err)
				}
				gaps = append(gaps, g...)
			}
			s := stats.Of(gaps)
			res.Handoff.Gaps[t.name] = append(res.Handoff.Gaps[t.name], Measure{Name: fmt.Sprintf("%s, %d waiters", t.name, n), Unit: "ms", S: s})
			cfg.logf("handoff %-14s %2d waiters: median %s ms (min %s, max %s, %d handoffs)", t.name, n, stats.Num(s.Median), stats.Num(s.Min), stats.Num(s.Max), s.N)
		}
	}
	if err := goAPIHandoff(ctx, cfg, res); err != nil {
		return err
	}
	sc, err := startCost(ctx, cfg, dir, cfg.size(30, 3))
	if err != nil {
		return err
	}
	res.Handoff.StartCost = Measure{Name: "fork to first stamp", Unit: "ms", S: stats.Of(sc)}
	return nil
}

// handoffRound runs one holder and n waiters on a fresh lock and returns
// the n gaps, in ms.
func handoffRound(ctx context.Context, cfg *config, dir string, t lockTool, n, round int) ([]float64, error) {
	tag := fmt.Sprintf("%s-%d-%d", strings.NewReplacer(" ", "", "(", "-", ")", "").Replace(t.name), n, round)
	lock := "handoff-" + tag
	log, fifo := filepath.Join(dir, tag+".stamps"), filepath.Join(dir, tag+".fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		return nil, err
	}
	out, err := os.Create(filepath.Join(dir, tag+".out"))
	if err != nil {
		return nil, err
	}
	defer out.Close()
	var procs []*exec.Cmd
	fail := func(err error) ([]float64, error) {
		killProcs(procs)
		return nil, fmt.Errorf("%w (output in %s)", err, out.Name())
	}
	holder, err := startProc(cfg, t.argv(lock, cfg.stamp, log, "hold", fifo), out)
	if err != nil {
		return fail(err)
	}
	procs = append(procs, holder)
	if err := waitStarts(ctx, log, 1, 30*time.Second); err != nil {
		return fail(err)
	}
	for i := 0; i < n; i++ {
		p, err := startProc(cfg, t.argv(lock, cfg.stamp, log), out)
		if err != nil {
			return fail(err)
		}
		procs = append(procs, p)
	}
	if err := waitFor(ctx, 60*time.Second, fmt.Sprintf("%d processes on %s", n+1, lock), func() (bool, error) {
		k, err := t.queued(ctx, lock)
		return k >= n+1, err
	}); err != nil {
		return fail(err)
	}
	// Let the last waiters settle into their wait (a watch, a blocked
	// flock) before the release.
	time.Sleep(100*time.Millisecond + time.Duration(n)*5*time.Millisecond)
	if err := release(fifo); err != nil {
		return fail(err)
	}
	if err := waitProcs(procs, 120*time.Second); err != nil {
		return nil, fmt.Errorf("%w (output in %s)", err, out.Name())
	}
	evs, err := readStamps(log)
	if err != nil {
		return nil, err
	}
	return gapsOf(evs, n+1)
}

// gapsOf checks that the stamps of holders commands do not overlap
// (S E S E ..., each E from the process of the S before it) and returns
// the gaps from each E to the next S, in ms.
func gapsOf(evs []stampEvent, holders int) ([]float64, error) {
	slices.SortStableFunc(evs, func(a, b stampEvent) int {
		switch {
		case a.T < b.T:
			return -1
		case a.T > b.T:
			return 1
		}
		return 0
	})
	if len(evs) != 2*holders {
		return nil, fmt.Errorf("%d stamps, want %d (a start and an end per holder)", len(evs), 2*holders)
	}
	var gaps []float64
	for i := 0; i < len(evs); i += 2 {
		s, e := evs[i], evs[i+1]
		if !s.Start || e.Start || s.PID != e.PID {
			return nil, fmt.Errorf("commands overlap: stamps %d and %d are %+v and %+v, want the start and end of one command", i, i+1, s, e)
		}
		if i > 0 {
			gaps = append(gaps, float64(s.T-evs[i-1].T)/1e6)
		}
	}
	return gaps, nil
}

// flockCount counts the flock(2) locks held or waited for on path, from
// /proc/locks ("->" marks a blocked waiter).
func flockCount(path string) (int, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		if os.IsNotExist(err) {
			return 0, nil
		}
		return 0, err
	}
	id := fmt.Sprintf("%02x:%02x:%d", unix.Major(st.Dev), unix.Minor(st.Dev), st.Ino)
	b, err := os.ReadFile("/proc/locks")
	if err != nil {
		return 0, err
	}
	n := 0
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if slices.Contains(f, "FLOCK") && slices.Contains(f, id) {
			n++
		}
	}
	return n, nil
}

// startCost measures the part of every gap that is the stamp's own start:
// from just before fork to its first stamp, started directly by the
// harness.
func startCost(ctx context.Context, cfg *config, dir string, runs int) ([]float64, error) {
	log := filepath.Join(dir, "startcost.stamps")
	var ds []float64
	for i := 0; i < runs; i++ {
		os.Remove(log)
		cmd := exec.CommandContext(ctx, cfg.stamp, log)
		t0 := clock.Now()
		if err := cmd.Run(); err != nil {
			return nil, fmt.Errorf("stamp: %w", err)
		}
		evs, err := readStamps(log)
		if err != nil {
			return nil, err
		}
		if len(evs) != 2 || !evs[0].Start {
			return nil, fmt.Errorf("stamp wrote %+v", evs)
		}
		ds = append(ds, float64(evs[0].T-int64(t0))/1e6)
	}
	return ds, nil
}

// goAPIHandoff runs the coordinators' own handoff benchmarks (no
// processes: from the start of Release to the next waiter's Acquire
// returning, goroutines with a coordinator each), with their temporary
// directories (embedded etcd's data, the local state) on tmpfs when there
// is one, like the harness's etcd server.
func goAPIHandoff(ctx context.Context, cfg *config, res *Results) error {
	benchtime, count := "200x", 3
	if cfg.smoke {
		benchtime, count = "5x", 1
	}
	var env []string
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		env = append(env, "TMPDIR=/dev/shm")
	}
	for _, b := range []struct{ pkg, name, metric string }{
		{"./pkg/coord/etcd", "etcd", "µs-median/handoff"},
		{"./pkg/coord/local", "local", "median-handoff-ns"},
	} {
		ls, err := goBench(ctx, cfg, "handoff-"+b.name, b.pkg, "^BenchmarkHandoff$", benchtime, count, env...)
		if err != nil {
			return err
		}
		byName := map[string][]float64{}
		var names []string
		for _, l := range ls {
			v, ok := l.Metrics[b.metric]
			if !ok {
				return fmt.Errorf("%s: %s reports no %s", b.pkg, l.Name, b.metric)
			}
			if strings.HasPrefix(b.metric, "µs") {
				v /= 1e3
			} else {
				v /= 1e6
			}
			if _, seen := byName[l.Name]; !seen {
				names = append(names, l.Name)
			}
			byName[l.Name] = append(byName[l.Name], v)
		}
		for _, n := range names {
			w := strings.TrimPrefix(n, "BenchmarkHandoff/waiters=")
			res.Handoff.GoAPI = append(res.Handoff.GoAPI, Measure{Name: fmt.Sprintf("%s, %s waiters", b.name, w), Cmd: b.pkg, Unit: "ms", S: stats.Of(byName[n])})
		}
	}
	return nil
}
