package main

import (
	"context"
	"os"
	"path/filepath"
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

	if res.Run.Init, err = initCosts(ctx, cfg, cfg.size(20, 2)); err != nil {
		return err
	}
	res.Run.Requests, err = requestCounts(ctx, cfg, srv, cfg.size(10, 2))
	return err
}
