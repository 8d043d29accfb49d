package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/fence-dev/fence/bench/internal/stats"
	"github.com/fence-dev/fence/pkg/clock"
)

// Names of the measured commands.
const (
	nameFenceLocal   = "fence run (local)"
	nameFlock        = "flock"
	nameFenceVersion = "fence version"
	nameStampNoop    = "small Go program"
	nameFenceEtcd    = "fence run (etcd)"
	nameEtcdctl      = "etcdctl lock"
	nameEtcdctlVer   = "etcdctl version"
)

// localState is the local backend's state directory for sections 1, 2, 5.
func localState(cfg *config) string { return filepath.Join(cfg.work, "state") }

// Command lines of one locked command, per tool.
func fenceLocalArgv(cfg *config, lock string, cmd ...string) []string {
	return append([]string{cfg.fence, "--state-dir", localState(cfg), "run", lock, "--"}, cmd...)
}

func flockArgv(cfg *config, lock string, cmd ...string) []string {
	return append([]string{"/usr/bin/flock", filepath.Join(cfg.work, "flock-"+lock)}, cmd...)
}

func fenceEtcdArgv(cfg *config, srv *etcdServer, lock string, cmd ...string) []string {
	return append([]string{cfg.fence, "--endpoints", srv.endpoint, "run", lock, "--"}, cmd...)
}

func etcdctlArgv(cfg *config, srv *etcdServer, lock string, cmd ...string) []string {
	return append([]string{cfg.etcdctl, "--endpoints=" + srv.endpoint, "lock", lock}, cmd...)
}

// runWholeProcess is section 1: hyperfine over `fence run L -- true` and
// its counterparts, with two reference points that show the floor of any
// Go program: `fence version` (the fence binary starting and exiting) and
// the stamp helper's no-op (a small Go program).
func runWholeProcess(ctx context.Context, cfg *config, srv *etcdServer, res *Results) error {
	if err := os.MkdirAll(localState(cfg), 0o700); err != nil {
		return err
	}
	warmup, runs, rounds := cfg.size(3, 1), cfg.size(60, 3), cfg.size(3, 1)
	res.Run.Runs, res.Run.Rounds = max(runs/rounds, 2)*rounds, rounds

	local := []hfCommand{
		{nameFenceLocal, fenceLocalArgv(cfg, "bench-run", "/bin/true")},
		{nameFlock, flockArgv(cfg, "bench-run", "/bin/true")},
		{nameFenceVersion, []string{cfg.fence, "version"}},
		{nameStampNoop, []string{cfg.stamp, "noop"}},
	}
	if cfg.before != "" {
		local = append(local,
			hfCommand{nameFenceLocal + " @" + cfg.compare, append([]string{cfg.before}, fenceLocalArgv(cfg, "bench-run", "/bin/true")[1:]...)},
			hfCommand{nameFenceVersion + " @" + cfg.compare, []string{cfg.before, "version"}})
	}
	times, err := hyperfine(ctx, cfg, "run-local", local, warmup, runs, rounds)
	if err != nil {
		return err
	}
	res.Run.Local = measures(local, times)

	etcd := []hfCommand{
		{nameFenceEtcd, fenceEtcdArgv(cfg, srv, "bench-run", "/bin/true")},
		{nameEtcdctl, etcdctlArgv(cfg, srv, "bench-run", "/bin/true")},
		{nameEtcdctlVer, []string{cfg.etcdctl, "version"}},
	}
	if cfg.before != "" {
		etcd = append(etcd, hfCommand{nameFenceEtcd + " @" + cfg.compare, append([]string{cfg.before}, fenceEtcdArgv(cfg, srv, "bench-run", "/bin/true")[1:]...)})
	}
	times, err = hyperfine(ctx, cfg, "run-etcd", etcd, warmup, runs, rounds)
	if err != nil {
		return err
	}
	res.Run.Etcd = measures(etcd, times)
	res.Run.Compare = cfg.compare

	if res.Run.Phases, err = phases(ctx, cfg, srv, cfg.size(20, 2)); err != nil {
		return err
	}
	if res.Run.Init, err = initCosts(ctx, cfg, cfg.size(20, 2)); err != nil {
		return err
	}
	res.Run.Requests, err = requestCounts(ctx, cfg, srv, cfg.size(10, 2))
	return err
}

// Phase splits the whole-process time of one tool around its command.
type Phase struct {
	Tool string
	// Before: from fork of the tool to the command's first stamp (the
	// command's own start included). After: from the command's last stamp
	// to the tool's exit as seen by wait(2). Total: fork to wait. ms.
	Before, After, Total stats.Summary
	// Marks (fence only): the stamps that fence and its watchdog write
	// with FENCE_BENCH_TRACE (internal/benchtrace), as ms since the fork,
	// in the order of a run, with the command's stamps and the wait.
	Marks []Mark `json:",omitempty"`
}

// Mark is one phase of a run: when it was reached, ms after the fork.
type Mark struct {
	Name string
	At   stats.Summary
}

// The order of a run's marks in the report (benchtrace's names, the
// command's stamps and the wait). Marks from other versions of fence are
// kept after these.
var markOrder = []string{
	"main", "watchdog_start", "open", "acquired", "watchdog_main", "watchdog_ready",
	"command_start", "command: first stamp", "command: last stamp", "command_end", "released", "exit", "wait(2) returned",
}

// phases runs each tool's `TOOL ... stamp LOG` directly, runs times, and
// splits its time at the command's stamps; fence also writes its own
// phases to LOG (FENCE_BENCH_TRACE).
func phases(ctx context.Context, cfg *config, srv *etcdServer, runs int) ([]Phase, error) {
	dir := filepath.Join(cfg.work, "phases")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	log := filepath.Join(dir, "stamps")
	tools := []struct {
		name  string
		fence bool
		argv  func(cmd ...string) []string
	}{
		{nameFenceLocal, true, func(c ...string) []string { return fenceLocalArgv(cfg, "bench-phase", c...) }},
		{nameFlock, false, func(c ...string) []string { return flockArgv(cfg, "bench-phase", c...) }},
		{nameFenceEtcd, true, func(c ...string) []string { return fenceEtcdArgv(cfg, srv, "bench-phase", c...) }},
		{nameEtcdctl, false, func(c ...string) []string { return etcdctlArgv(cfg, srv, "bench-phase", c...) }},
	}
	before, after, total := map[string][]float64{}, map[string][]float64{}, map[string][]float64{}
	marks := map[string]map[string][]float64{}
	for i := 0; i < runs; i++ {
		for _, t := range tools {
			os.Remove(log)
			argv := t.argv(cfg.stamp, log)
			cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
			cmd.Env, cmd.Dir = cfg.env, cfg.work
			if t.fence {
				cmd.Env = append(slices.Clip(cfg.env), "FENCE_BENCH_TRACE="+log)
			}
			t0 := clock.Now()
			out, err := cmd.CombinedOutput()
			t1 := clock.Now()
			if err != nil {
				return nil, fmt.Errorf("%s: %v\n%s", strings.Join(argv, " "), err, out)
			}
			evs, trace, err := readTrace(log)
			if err != nil {
				return nil, err
			}
			if len(evs) != 2 || !evs[0].Start || evs[1].Start {
				return nil, fmt.Errorf("%s: stamps %+v", t.name, evs)
			}
			before[t.name] = append(before[t.name], float64(evs[0].T-int64(t0))/1e6)
			after[t.name] = append(after[t.name], float64(int64(t1)-evs[1].T)/1e6)
			total[t.name] = append(total[t.name], float64(t1-t0)/1e6)
			if !t.fence {
				continue
			}
			if len(trace) == 0 {
				return nil, fmt.Errorf("%s: FENCE_BENCH_TRACE: no phase stamps in %s", t.name, log)
			}
			m := marks[t.name]
			if m == nil {
				m = map[string][]float64{}
				marks[t.name] = m
			}
			ms := func(t int64) float64 { return float64(t-int64(t0)) / 1e6 }
			for _, tr := range trace {
				m[tr.name] = append(m[tr.name], ms(tr.t))
			}
			m["command: first stamp"] = append(m["command: first stamp"], ms(evs[0].T))
			m["command: last stamp"] = append(m["command: last stamp"], ms(evs[1].T))
			m["wait(2) returned"] = append(m["wait(2) returned"], ms(int64(t1)))
		}
	}
	var ps []Phase
	for _, t := range tools {
		ph := Phase{Tool: t.name, Before: stats.Of(before[t.name]), After: stats.Of(after[t.name]), Total: stats.Of(total[t.name])}
		names := slices.Clone(markOrder)
		for n := range marks[t.name] {
			if !slices.Contains(names, n) {
				names = append(names, n)
			}
		}
		for _, n := range names {
			if xs := marks[t.name][n]; len(xs) > 0 {
				ph.Marks = append(ph.Marks, Mark{Name: n, At: stats.Of(xs)})
			}
		}
		ps = append(ps, ph)
	}
	return ps, nil
}

// traceMark is one line of FENCE_BENCH_TRACE: a phase and its time.
type traceMark struct {
	name string
	t    int64 // CLOCK_BOOTTIME, ns
}

// readTrace reads a file where bench/cmd/stamp and fence's trace both
// append lines "<kind> <ns> <pid>": the stamps ("S", "E") and the phases.
func readTrace(path string) ([]stampEvent, []traceMark, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	var evs []stampEvent
	var marks []traceMark
	for _, l := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
		fs := strings.Fields(l)
		if len(fs) != 3 {
			return nil, nil, fmt.Errorf("%s: bad line %q", path, l)
		}
		t, err1 := strconv.ParseInt(fs[1], 10, 64)
		pid, err2 := strconv.Atoi(fs[2])
		if err1 != nil || err2 != nil {
			return nil, nil, fmt.Errorf("%s: bad line %q", path, l)
		}
		switch fs[0] {
		case "S", "E":
			evs = append(evs, stampEvent{Start: fs[0] == "S", T: t, PID: pid})
		default:
			marks = append(marks, traceMark{name: fs[0], t: t})
		}
	}
	return evs, marks, nil
}
