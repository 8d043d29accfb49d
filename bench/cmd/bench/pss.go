package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// ConcurrentMemory is what N `fence run`s holding N locks at once on one
// host cost together: the proportional set size (PSS, from
// /proc/PID/smaps_rollup, which counts a page shared by k processes as 1/k
// of it in each) summed over every fence and every watchdog, the commands
// left out. Shared binary pages are so counted once, which RSS would count
// N times.
type ConcurrentMemory struct {
	Build   string // "this" or the --compare revision
	Backend string
	Holders int
	PSSMiB  float64 // fence and watchdogs together
	// FencePSSMiB and WatchdogPSSMiB split PSSMiB.
	FencePSSMiB    float64
	WatchdogPSSMiB float64
	RSSMiB         float64 // the same processes' RSS summed, for comparison
}

// runConcurrentMemory starts N held `fence run`s of each build on each
// backend, each around a command that waits on its own FIFO, reads the PSS
// of fence and its watchdog in each, then lets them all end.
func runConcurrentMemory(ctx context.Context, cfg *config, srv *etcdServer, res *Results) error {
	n := cfg.size(100, 5)
	builds := []struct{ name, bin string }{{"this", cfg.fence}}
	if cfg.before != "" {
		builds = append(builds, struct{ name, bin string }{cfg.compare, cfg.before})
	}
	for _, b := range builds {
		for _, backend := range []string{"local", "etcd"} {
			m, err := concurrentHolders(ctx, cfg, srv, b.bin, backend, n)
			if err != nil {
				return fmt.Errorf("%s (%s): %w", b.name, backend, err)
			}
			m.Build = b.name
			cfg.logf("%d held fence runs (%s, %s): PSS %.1f MiB (fence %.1f, watchdogs %.1f), RSS %.1f MiB",
				n, backend, b.name, m.PSSMiB, m.FencePSSMiB, m.WatchdogPSSMiB, m.RSSMiB)
			res.Memory.Concurrent = append(res.Memory.Concurrent, m)
		}
	}
	return nil
}

func concurrentHolders(ctx context.Context, cfg *config, srv *etcdServer, bin, backend string, n int) (m ConcurrentMemory, err error) {
	m = ConcurrentMemory{Backend: backend, Holders: n}
	dir, err := os.MkdirTemp(cfg.work, "pss-")
	if err != nil {
		return m, err
	}
	log := filepath.Join(dir, "stamps.log")
	var procs []*exec.Cmd
	defer func() {
		if err != nil {
			killProcs(procs)
		}
	}()
	var fifos []string
	out, err := os.Create(filepath.Join(dir, "procs.out"))
	if err != nil {
		return m, err
	}
	defer out.Close()
	for i := 0; i < n; i++ {
		fifo := filepath.Join(dir, fmt.Sprintf("hold-%d.fifo", i))
		if err := syscall.Mkfifo(fifo, 0o600); err != nil {
			return m, err
		}
		fifos = append(fifos, fifo)
		lock := fmt.Sprintf("bench-pss-%d", i)
		var argv []string
		if backend == "local" {
			argv = fenceLocalArgv(cfg, lock, cfg.stamp, log, "hold", fifo)
		} else {
			argv = fenceEtcdArgv(cfg, srv, lock, cfg.stamp, log, "hold", fifo)
		}
		argv[0] = bin
		p, err := startProc(cfg, argv, out)
		if err != nil {
			return m, err
		}
		procs = append(procs, p)
	}
	if err := waitStarts(ctx, log, n, 120*time.Second); err != nil {
		return m, err
	}
	for _, p := range procs {
		fence := p.Process.Pid
		ch := children(fence)
		if len(ch) != 1 {
			return m, fmt.Errorf("fence pid %d has children %v, want one (the watchdog)", fence, ch)
		}
		fp, fr, err := smapsRollup(fence)
		if err != nil {
			return m, err
		}
		wp, wr, err := smapsRollup(ch[0])
		if err != nil {
			return m, err
		}
		m.FencePSSMiB += fp / 1024
		m.WatchdogPSSMiB += wp / 1024
		m.RSSMiB += (fr + wr) / 1024
	}
	m.PSSMiB = m.FencePSSMiB + m.WatchdogPSSMiB
	for _, f := range fifos {
		if err := release(f); err != nil {
			return m, err
		}
	}
	return m, waitProcs(procs, 60*time.Second)
}

// smapsRollup reads the Pss and Rss of pid, in KiB.
func smapsRollup(pid int) (pss, rss float64, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return 0, 0, err
	}
	field := func(name string) (float64, error) {
		for _, l := range bytes.Split(b, []byte("\n")) {
			if v, ok := strings.CutPrefix(string(l), name+":"); ok {
				if f := strings.Fields(v); len(f) > 0 {
					return strconv.ParseFloat(f[0], 64)
				}
			}
		}
		return 0, fmt.Errorf("no %s in /proc/%d/smaps_rollup", name, pid)
	}
	if pss, err = field("Pss"); err != nil {
		return 0, 0, err
	}
	rss, err = field("Rss")
	return pss, rss, err
}
