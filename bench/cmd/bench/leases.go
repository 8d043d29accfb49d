package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/fence-dev/fence/internal/history/auto"
	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/coord/etcd"
	"github.com/fence-dev/fence/pkg/coord/local"
	"github.com/fence-dev/fence/pkg/fencing"
)

// leasesMain is `bench leases`: one process that takes N leases and keeps
// them renewed, lets the renewals settle, measures its own CPU time
// (getrusage) over a window, prints a LeaseScale as one JSON line on
// stdout, and keeps holding until its stdin closes (while the harness runs
// `fence list` over the locks).
//
// Backends: etcd and local take each lease with fencing.Acquire (each Held
// renews every TTL/3); etcd-history does the same through the coordinator
// that fence run holds its lease with (the etcd backend decorated by the
// lease history, internal/history/auto); etcd-session is the reference:
// etcd's own concurrency.Mutex, one concurrency.Session (one lease) per
// lock, kept alive by the client's shared keep-alive stream.
func leasesMain(args []string) int {
	fs := flag.NewFlagSet("bench leases", flag.ContinueOnError)
	o := leaseOpts{}
	fs.StringVar(&o.backend, "backend", "etcd", "etcd, etcd-history (as fence run: with the lease history), local, or etcd-session (concurrency.Mutex, the reference)")
	fs.StringVar(&o.endpoints, "endpoints", "", "etcd endpoints, comma-separated")
	fs.StringVar(&o.stateDir, "state-dir", "", "local state directory")
	fs.IntVar(&o.n, "n", 10000, "leases")
	fs.DurationVar(&o.ttl, "ttl", 15*time.Second, "lease TTL")
	fs.DurationVar(&o.settle, "settle", 6*time.Second, "time from the last grant to the window")
	fs.DurationVar(&o.window, "window", 30*time.Second, "measured window")
	fs.IntVar(&o.conc, "concurrency", 32, "parallel acquisitions")
	fs.StringVar(&o.cpuprofile, "cpuprofile", "", "write a CPU profile of the window to this file")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	out, err := holdLeases(context.Background(), o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench leases:", err)
		return 1
	}
	b, _ := json.Marshal(out)
	fmt.Println(string(b))
	_, _ = io.Copy(io.Discard, os.Stdin)
	return 0
}

type leaseOpts struct {
	backend, endpoints, stateDir string
	n, conc                      int
	ttl, settle, window          time.Duration
	cpuprofile                   string
}

// parallel runs fn(i) for i in [0, n) on conc goroutines and returns the
// first error (the others stop taking new work).
func parallel(n, conc int, fn func(i int) error) error {
	var (
		next  atomic.Int64
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	for w := 0; w < conc; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if err := fn(i); err != nil {
					mu.Lock()
					if first == nil {
						first = fmt.Errorf("lease %d: %w", i, err)
					}
					mu.Unlock()
					next.Store(int64(n))
					return
				}
			}
		}()
	}
	wg.Wait()
	return first
}

func lockName(i int) string { return fmt.Sprintf("scale/%05d", i) }

func holdLeases(ctx context.Context, o leaseOpts) (LeaseScale, error) {
	res := LeaseScale{Backend: o.backend, Leases: o.n, TTL: o.ttl.String()}
	if o.backend == "etcd-session" {
		return holdSessions(ctx, o, res)
	}
	var c coord.Coordinator
	switch o.backend {
	case "etcd", "etcd-history":
		ec, err := etcd.New(ctx, strings.Split(o.endpoints, ","), etcd.WithDialTimeout(10*time.Second))
		if err != nil {
			return res, err
		}
		c = ec
		if o.backend == "etcd-history" {
			if c, err = auto.Wrap(ec); err != nil {
				return res, err
			}
		}
	case "local":
		lc, err := local.Open(o.stateDir)
		if err != nil {
			return res, err
		}
		c = lc
	default:
		return res, fmt.Errorf("unknown backend %q", o.backend)
	}
	t0 := time.Now()
	helds := make([]*fencing.Held, o.n)
	err := parallel(o.n, o.conc, func(i int) error {
		name := lockName(i)
		if o.backend == "etcd-history" {
			name = "history-" + name // beside the etcd row's leases, which outlive their process by a TTL
		}
		h, err := fencing.Acquire(ctx, c, name,
			coord.AcquireOptions{TTL: o.ttl, Holder: "bench-scale", Wait: 0})
		helds[i] = h
		return err
	})
	if err != nil {
		return res, err
	}
	res.AcquireSeconds = time.Since(t0).Seconds()
	time.Sleep(o.settle)
	renewals := func() (ok, failed int) {
		for _, h := range helds {
			st := h.Stats()
			ok += st.Renewals
			failed += st.Failures
		}
		return
	}
	ren0, fail0 := renewals()
	if err := measureWindow(o, &res); err != nil {
		return res, err
	}
	ren1, fail1 := renewals()
	res.Renewals, res.RenewFailures = ren1-ren0, fail1-fail0
	for _, h := range helds {
		if err := context.Cause(h.Context()); err != nil {
			if res.Lost == 0 {
				res.LostFirst = err.Error()
			}
			res.Lost++
		}
	}
	return res, nil
}

// holdSessions is the reference: n concurrency.Mutex locks, each on its own
// session (one etcd lease), all kept alive by one client.
func holdSessions(ctx context.Context, o leaseOpts, res LeaseScale) (LeaseScale, error) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: strings.Split(o.endpoints, ","), DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return res, err
	}
	t0 := time.Now()
	sessions := make([]*concurrency.Session, o.n)
	err = parallel(o.n, o.conc, func(i int) error {
		s, err := concurrency.NewSession(cli, concurrency.WithTTL(int(o.ttl/time.Second)))
		if err != nil {
			return err
		}
		sessions[i] = s
		return concurrency.NewMutex(s, "/bench-sessions/"+lockName(i)).TryLock(ctx)
	})
	if err != nil {
		return res, err
	}
	res.AcquireSeconds = time.Since(t0).Seconds()
	time.Sleep(o.settle)
	if err := measureWindow(o, &res); err != nil {
		return res, err
	}
	for _, s := range sessions {
		select {
		case <-s.Done():
			res.Lost++
			if res.LostFirst == "" {
				res.LostFirst = "session ended"
			}
		default:
		}
	}
	res.Renewals = -1 // the client does not count its keep-alives
	return res, nil
}

// measureWindow sleeps through the window and records the process's CPU
// time over it and its memory at the end.
func measureWindow(o leaseOpts, res *LeaseScale) error {
	var ru0, ru1 unix.Rusage
	if o.cpuprofile != "" {
		f, err := os.Create(o.cpuprofile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
	}
	w0 := time.Now()
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru0); err != nil {
		return err
	}
	time.Sleep(o.window)
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru1); err != nil {
		return err
	}
	wall := time.Since(w0).Seconds()
	if o.cpuprofile != "" {
		pprof.StopCPUProfile()
	}
	tv := func(t unix.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
	user, sys := tv(ru1.Utime)-tv(ru0.Utime), tv(ru1.Stime)-tv(ru0.Stime)
	res.WindowSeconds = wall
	res.CPUSeconds = user + sys
	res.CPUShare = (user + sys) / wall
	res.UserShare, res.SysShare = user/wall, sys/wall
	res.RSSMiB, res.HWMMiB = procStatusMiB("VmRSS:"), procStatusMiB("VmHWM:")
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	res.HeapMiB = float64(ms.HeapInuse) / (1 << 20)
	res.Goroutines = runtime.NumGoroutine()
	return nil
}

// procStatusMiB reads a kB field of /proc/self/status, in MiB.
func procStatusMiB(field string) float64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, field); ok {
			if f := strings.Fields(v); len(f) > 0 {
				kb, _ := strconv.ParseFloat(f[0], 64)
				return kb / 1024
			}
		}
	}
	return 0
}
