package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
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
	times, err = hyperfine(ctx, cfg, "run-etcd", etcd, warmup, runs, rounds)
	if err != nil {
		return err
	}
	res.Run.Etcd = measures(etcd, times)

	res.Run.Phases, err = phases(ctx, cfg, srv, cfg.size(20, 2))
	return err
}

// Phase splits the whole-process time of one tool around its command.
type Phase struct {
	Tool string
	// Before: from fork of the tool to the command's first stamp (the
	// command's own start included). After: from the command's last stamp
	// to the tool's exit as seen by wait(2). Total: fork to wait. ms.
	Before, After, Total stats.Summary
}

// phases runs each tool's `TOOL ... stamp LOG` directly, runs times, and
// splits its time at the command's stamps.
func phases(ctx context.Context, cfg *config, srv *etcdServer, runs int) ([]Phase, error) {
	dir := filepath.Join(cfg.work, "phases")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	log := filepath.Join(dir, "stamps")
	tools := []struct {
		name string
		argv func(cmd ...string) []string
	}{
		{nameFenceLocal, func(c ...string) []string { return fenceLocalArgv(cfg, "bench-phase", c...) }},
		{nameFlock, func(c ...string) []string { return flockArgv(cfg, "bench-phase", c...) }},
		{nameFenceEtcd, func(c ...string) []string { return fenceEtcdArgv(cfg, srv, "bench-phase", c...) }},
		{nameEtcdctl, func(c ...string) []string { return etcdctlArgv(cfg, srv, "bench-phase", c...) }},
	}
	before, after, total := map[string][]float64{}, map[string][]float64{}, map[string][]float64{}
	for i := 0; i < runs; i++ {
		for _, t := range tools {
			os.Remove(log)
			argv := t.argv(cfg.stamp, log)
			cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
			cmd.Env, cmd.Dir = cfg.env, cfg.work
			t0 := clock.Now()
			out, err := cmd.CombinedOutput()
			t1 := clock.Now()
			if err != nil {
				return nil, fmt.Errorf("%s: %v\n%s", strings.Join(argv, " "), err, out)
			}
			evs, err := readStamps(log)
			if err != nil {
				return nil, err
			}
			if len(evs) != 2 || !evs[0].Start || evs[1].Start {
				return nil, fmt.Errorf("%s: stamps %+v", t.name, evs)
			}
			before[t.name] = append(before[t.name], float64(evs[0].T-int64(t0))/1e6)
			after[t.name] = append(after[t.name], float64(int64(t1)-evs[1].T)/1e6)
			total[t.name] = append(total[t.name], float64(t1-t0)/1e6)
		}
	}
	var ps []Phase
	for _, t := range tools {
		ps = append(ps, Phase{Tool: t.name, Before: stats.Of(before[t.name]), After: stats.Of(after[t.name]), Total: stats.Of(total[t.name])})
	}
	return ps, nil
}
