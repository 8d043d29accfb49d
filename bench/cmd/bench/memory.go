package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/fence-dev/fence/bench/internal/stats"
)

// runMemory is section 5: /usr/bin/time's maximum resident set size of one
// locked `true` per tool, then the resident memory of each process while a
// lock is held (fence's watchdog apart from fence).
func runMemory(ctx context.Context, cfg *config, srv *etcdServer, res *Results) error {
	runs := cfg.size(15, 2)
	res.Memory.Runs = runs
	cmds := []hfCommand{
		{nameFenceLocal, fenceLocalArgv(cfg, "bench-mem", "/bin/true")},
		{nameFlock, flockArgv(cfg, "bench-mem", "/bin/true")},
		{nameFenceEtcd, fenceEtcdArgv(cfg, srv, "bench-mem", "/bin/true")},
		{nameEtcdctl, etcdctlArgv(cfg, srv, "bench-mem", "/bin/true")},
	}
	out := filepath.Join(cfg.work, "time.out")
	peak := map[string][]float64{}
	for i := 0; i < runs; i++ {
		for _, c := range cmds {
			args := append([]string{"-f", "%M", "-o", out}, c.Argv...)
			cmd := exec.CommandContext(ctx, "/usr/bin/time", args...)
			cmd.Env, cmd.Dir = cfg.env, cfg.work
			if b, err := cmd.CombinedOutput(); err != nil {
				return fmt.Errorf("/usr/bin/time %s: %v\n%s", c.line(), err, b)
			}
			b, err := os.ReadFile(out)
			if err != nil {
				return err
			}
			kb, err := strconv.ParseFloat(strings.TrimSpace(lastLines(string(b), 1)), 64)
			if err != nil {
				return fmt.Errorf("/usr/bin/time output %q: %w", b, err)
			}
			peak[c.Name] = append(peak[c.Name], kb/1024)
		}
	}
	for _, c := range cmds {
		res.Memory.Peak = append(res.Memory.Peak, Measure{Name: c.Name, Cmd: "/usr/bin/time -v " + displayCmd(c.Argv), Unit: "MiB", S: stats.Of(peak[c.Name])})
	}

	// Resident while holding: the command is a stamp that waits on a FIFO.
	type holdTool struct {
		name  string
		argv  func(cmd ...string) []string
		parts []string // names of the supervising processes, parent first
	}
	tools := []holdTool{
		{nameFenceLocal, func(c ...string) []string { return fenceLocalArgv(cfg, "bench-hold", c...) }, []string{"fence (local)", "fence watchdog (local)"}},
		{nameFenceEtcd, func(c ...string) []string { return fenceEtcdArgv(cfg, srv, "bench-hold", c...) }, []string{"fence (etcd)", "fence watchdog (etcd)"}},
		{nameEtcdctl, func(c ...string) []string { return etcdctlArgv(cfg, srv, "bench-hold", c...) }, []string{"etcdctl lock"}},
		{nameFlock, func(c ...string) []string { return flockArgv(cfg, "bench-hold", c...) }, []string{"flock"}},
	}
	holding := map[string][]float64{}
	samples := cfg.size(3, 1)
	dir := filepath.Join(cfg.work, "memory")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for i := 0; i < samples; i++ {
		for _, t := range tools {
			log := filepath.Join(dir, fmt.Sprintf("hold-%d.log", i))
			fifo := filepath.Join(dir, fmt.Sprintf("hold-%d.fifo", i))
			os.Remove(log)
			os.Remove(fifo)
			if err := syscall.Mkfifo(fifo, 0o600); err != nil {
				return err
			}
			outf, err := os.Create(filepath.Join(dir, "procs.out"))
			if err != nil {
				return err
			}
			p, err := startProc(cfg, t.argv(cfg.stamp, log, "hold", fifo), outf)
			outf.Close()
			if err != nil {
				return err
			}
			if err := waitStarts(ctx, log, 1, 30*time.Second); err != nil {
				killProcs([]*exec.Cmd{p})
				return fmt.Errorf("%s: %w", t.name, err)
			}
			// The chain of supervising processes: fence, its watchdog; then
			// the stamp (not counted).
			pid := p.Process.Pid
			for j, part := range t.parts {
				if j > 0 {
					ch := children(pid)
					if len(ch) != 1 {
						killProcs([]*exec.Cmd{p})
						return fmt.Errorf("%s: pid %d has children %v, want one (the watchdog)", t.name, pid, ch)
					}
					pid = ch[0]
				}
				kb, err := rssKiB(pid)
				if err != nil {
					killProcs([]*exec.Cmd{p})
					return err
				}
				holding[part] = append(holding[part], kb/1024)
			}
			if err := release(fifo); err != nil {
				killProcs([]*exec.Cmd{p})
				return err
			}
			if err := waitProcs([]*exec.Cmd{p}, 30*time.Second); err != nil {
				return err
			}
		}
	}
	for _, t := range tools {
		for _, part := range t.parts {
			res.Memory.Holding = append(res.Memory.Holding, Measure{Name: part, Unit: "MiB", S: stats.Of(holding[part])})
		}
	}
	return nil
}
