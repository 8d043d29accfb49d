// Command bench is fence's benchmark harness. It measures fence side by side
// with flock(1) and etcdctl lock (etcd 3.7, on the same etcd server), and
// writes docs/benchmarks.md with its tables and SVG charts.
//
// Run it through bench/run (which installs missing Debian tools first):
//
//	bash bench/run            # the whole harness, about 6-8 minutes on 2 cores
//	bash bench/run --smoke    # every section at toy sizes (CI): no timings asserted
//
// or directly: go run ./bench/cmd/bench [flags]. Flags:
//
//	--smoke            tiny sizes; the report goes to the work directory
//	--out DIR          where benchmarks.md and benchmarks/ go (default docs/,
//	                   or the work directory with --smoke)
//	--keep             keep the work directory (binaries, logs, raw results)
//	--etcd-data-dir D  etcd's data directory (default: a fresh directory on
//	                   tmpfs, /dev/shm, so that disk fsync latency, the same
//	                   for both tools, does not drown the difference)
//	--render FILE      only rewrite the report from a results.json
//	                   (after editing the report's text or floors.md)
//	--baseline FILE    an earlier run's results.json: the report shows its
//	                   targets and figures beside this run's (before, after);
//	                   the new results.json carries it (Baseline), so the
//	                   repository keeps one file of figures
//	--compare REV      also build fence at git revision REV and measure it
//	                   in section 1 beside this fence, in the same rounds
//
// The sections, each described in docs/benchmarks.md: whole-process time of
// one locked `true` (hyperfine), peak memory (/usr/bin/time -v), handoff
// latency between processes (CLOCK_BOOTTIME stamps written by bench/cmd/stamp),
// contended throughput (Go benchmark bench/contended), scale (10,000 leases
// renewed by one process, `fence list` over them, the dashboard's frame),
// PostgreSQL (fence's PostgreSQL coordinator beside cirello.io/pglock and
// pg_advisory_lock on one PostgreSQL server: bench/contended, postgres.go).
//
// The hidden subcommand `bench leases` is the 10,000-lease holder that the
// scale section starts.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"time"
)

// config is what the flags chose, plus the paths the harness set up.
type config struct {
	smoke       bool
	out         string
	keep        bool
	etcdDataDir string

	root    string // repository root
	work    string // work directory
	compare string // --compare: a git revision whose fence section 1 also measures
	before  string // fence built at compare ("" without)
	fence   string // built binaries
	etcdctl string
	stamp   string
	self    string // this program, for `bench leases`
	env     []string
	log     io.Writer // progress, on stderr
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "leases" {
		os.Exit(leasesMain(os.Args[2:]))
	}
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run() error {
	cfg := &config{log: os.Stderr}
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.BoolVar(&cfg.smoke, "smoke", false, "run every section at toy sizes (CI); timings are not asserted")
	fs.StringVar(&cfg.out, "out", "", "directory for benchmarks.md and benchmarks/ (default docs/, or the work directory with --smoke)")
	fs.BoolVar(&cfg.keep, "keep", false, "keep the work directory")
	fs.StringVar(&cfg.etcdDataDir, "etcd-data-dir", "", "etcd data directory (default: a fresh directory under /dev/shm)")
	fromJSON := fs.String("render", "", "only rewrite the report from this results.json (no measurement)")
	baseline := fs.String("baseline", "", "an earlier run's results.json, shown beside this run's figures (before and after)")
	fs.StringVar(&cfg.compare, "compare", "", "a git revision: section 1 also measures fence built at it, alternating with this fence (before and after in one run)")
	if err := fs.Parse(os.Args[1:]); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	started := time.Now()
	root, err := repoRoot()
	if err != nil {
		return err
	}
	cfg.root = root
	var base *Results
	if *baseline != "" {
		if base, err = readResults(*baseline); err != nil {
			return err
		}
		base.Baseline = nil
	}
	if *fromJSON != "" {
		return render(cfg, *fromJSON, base)
	}
	if err := checkTools(); err != nil {
		return err
	}
	if cfg.work, err = os.MkdirTemp("", "fence-bench-"); err != nil {
		return err
	}
	if cfg.keep {
		cfg.logf("work directory: %s", cfg.work)
	} else {
		defer os.RemoveAll(cfg.work)
	}
	if cfg.out == "" {
		cfg.out = filepath.Join(root, "docs")
		if cfg.smoke {
			cfg.out = filepath.Join(cfg.work, "report")
		}
	}
	cfg.env = cleanEnv(cfg.work)
	if err := build(ctx, cfg); err != nil {
		return err
	}
	if cfg.self, err = os.Executable(); err != nil {
		return err
	}

	res := &Results{Smoke: cfg.smoke, Started: started.UTC(), Baseline: base}
	load := startLoadSampler(2 * time.Second)
	res.Machine = machineInfo(ctx, cfg)

	etcdDir := cfg.etcdDataDir
	if etcdDir == "" {
		var cleanup func()
		etcdDir, cleanup = tmpfsDir(cfg)
		if !cfg.keep {
			defer cleanup()
		}
	}
	srv, err := startEtcd(ctx, etcdDir, filepath.Join(cfg.work, "etcd.log"))
	if err != nil {
		return err
	}
	defer srv.stop()
	res.Machine.EtcdDataDir = describeFS(etcdDir)
	res.Machine.StateDir = describeFS(cfg.work)

	sections := []struct {
		name string
		fn   func(context.Context, *config, *etcdServer, *Results) error
	}{
		{"whole-process time", runWholeProcess},
		{"peak memory", runMemory},
		{"memory of 100 held runs", runConcurrentMemory},
		{"handoff latency", runHandoff},
		{"contended throughput", runContended},
		{"scale", runScale},
		{"postgres", runPostgres},
	}
	for _, s := range sections {
		t0 := time.Now()
		cfg.logf("== %s", s.name)
		if err := s.fn(ctx, cfg, srv, res); err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
		res.SectionSeconds = append(res.SectionSeconds, SectionTime{s.name, time.Since(t0).Seconds()})
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	res.Load = load.stop()
	res.Seconds = time.Since(started).Seconds()
	res.evaluate()
	if err := writeReport(cfg, res); err != nil {
		return err
	}
	cfg.logf("wrote %s (%.0fs)", filepath.Join(cfg.out, "benchmarks.md"), res.Seconds)
	if cfg.smoke {
		cfg.logf("smoke run: the harness works; its timings are not meant to be read or asserted")
	}
	for _, t := range res.Targets {
		cfg.logf("  %-52s %s", t.Name, t.Verdict())
	}
	return nil
}

func (c *config) logf(format string, args ...any) {
	fmt.Fprintf(c.log, "bench: "+format+"\n", args...)
}

// size picks the full or the smoke value.
func (c *config) size(full, smoke int) int {
	if c.smoke {
		return smoke
	}
	return full
}

func (c *config) dur(full, smoke time.Duration) time.Duration {
	if c.smoke {
		return smoke
	}
	return full
}

// repoRoot is the directory of fence's go.mod, found from the working
// directory upwards.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && strings.Contains(string(b), "module github.com/fence-dev/fence\n") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("run from inside the fence repository (no go.mod of github.com/fence-dev/fence above the working directory)")
		}
		dir = parent
	}
}

// checkTools names the Debian packages of missing tools in one error.
func checkTools() error {
	var missing []string
	for _, t := range []struct{ path, pkg string }{
		{"hyperfine", "hyperfine"}, {"flock", "util-linux"}, {"/usr/bin/time", "time"},
		{etcdBinary(), "etcd-server"}, {"go", "golang (Go 1.26)"},
	} {
		if _, err := exec.LookPath(t.path); err != nil {
			missing = append(missing, t.pkg)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("missing tools; install the Debian packages %s (bench/run does this as root)", strings.Join(missing, ", "))
	}
	return nil
}

// cleanEnv is the environment of every measured process: no FENCE_ or
// ETCDCTL_ variables from the caller, no config file (XDG_CONFIG_HOME points
// into the work directory).
func cleanEnv(work string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "FENCE_") || strings.HasPrefix(kv, "ETCDCTL_") ||
			strings.HasPrefix(kv, "XDG_CONFIG_HOME=") || strings.HasPrefix(kv, "XDG_STATE_HOME=") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, "XDG_CONFIG_HOME="+filepath.Join(work, "xdg-config"), "XDG_STATE_HOME="+filepath.Join(work, "xdg-state"))
}

// build compiles fence (`go build ./cmd/fence`; fence is its own watchdog),
// the stamp helper and etcdctl 3.7 from the tools-only module bench/tools,
// all with CGO_ENABLED=0, as the releases of both are built
// (goreleaser.yaml; etcd's release scripts): a static binary starts about 1
// to 2.5 ms sooner than one linked against the C library. The revision to
// compare with is built with the tags its own internal/release names, if
// any, as it was released.
func build(ctx context.Context, cfg *config) error {
	bin := filepath.Join(cfg.work, "bin")
	cfg.fence, cfg.stamp, cfg.etcdctl = filepath.Join(bin, "fence"), filepath.Join(bin, "stamp"), filepath.Join(bin, "etcdctl")
	steps := []struct {
		dir  string
		args []string
	}{
		{cfg.root, []string{"build", "-o", cfg.fence, "./cmd/fence"}},
		{cfg.root, []string{"build", "-o", cfg.stamp, "./bench/cmd/stamp"}},
		{filepath.Join(cfg.root, "bench", "tools"), []string{"build", "-o", cfg.etcdctl, "go.etcd.io/etcd/etcdctl/v3"}},
	}
	if cfg.compare != "" {
		// fence at the revision to compare with, from git archive (its small
		// watchdog too, for a revision that still had cmd/fence-watchdog:
		// that fence runs it from beside itself), built the same way.
		src := filepath.Join(cfg.work, "compare-src")
		if err := os.MkdirAll(src, 0o755); err != nil {
			return err
		}
		arch := exec.CommandContext(ctx, "sh", "-c", `git -C "$1" archive "$2" | tar -x -C "$3"`, "sh", cfg.root, cfg.compare, src)
		if out, err := arch.CombinedOutput(); err != nil {
			return fmt.Errorf("--compare %s: git archive: %v\n%s", cfg.compare, err, out)
		}
		cfg.before = filepath.Join(cfg.work, "bin-compare", "fence")
		steps = append(steps, struct {
			dir  string
			args []string
		}{src, []string{"build", "-tags", releaseTags(src), "-o", cfg.before, "./cmd/fence"}})
		if _, err := os.Stat(filepath.Join(src, "cmd", "fence-watchdog")); err == nil {
			steps = append(steps, struct {
				dir  string
				args []string
			}{src, []string{"build", "-o", filepath.Join(cfg.work, "bin-compare", "fence-watchdog"), "-tags", "fence_watchdog", "./cmd/fence-watchdog"}})
		}
	}
	for _, s := range steps {
		t0 := time.Now()
		cmd := exec.CommandContext(ctx, "go", s.args...)
		cmd.Dir = s.dir
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go %s (in %s): %v\n%s", strings.Join(s.args, " "), s.dir, err, out)
		}
		cfg.logf("built %s (%.1fs)", s.args[slices.Index(s.args, "-o")+1], time.Since(t0).Seconds())
	}
	return nil
}

// releaseTags are the build tags of the fence release in the source tree
// src: its internal/release.Tags (grpcnotrace, until the one-binary change
// removed the package), "" when it has none.
func releaseTags(src string) string {
	b, err := os.ReadFile(filepath.Join(src, "internal", "release", "release.go"))
	if err != nil {
		return ""
	}
	if m := regexp.MustCompile(`(?m)^const Tags = "([^"]*)"`).FindSubmatch(b); m != nil {
		return string(m[1])
	}
	return ""
}

// render rewrites the report from saved results (after a change to the
// report's text or to floors.md).
func render(cfg *config, path string, base *Results) error {
	res, err := readResults(path)
	if err != nil {
		return err
	}
	if base != nil {
		res.Baseline = base
	}
	if cfg.out == "" {
		cfg.out = filepath.Join(cfg.root, "docs")
	}
	res.evaluate()
	if err := writeReport(cfg, res); err != nil {
		return err
	}
	cfg.logf("wrote %s from %s", filepath.Join(cfg.out, "benchmarks.md"), path)
	return nil
}

// readResults reads a results.json with the baseline it carries, if any
// (one level of before and after: a baseline's own baseline is dropped).
func readResults(path string) (*Results, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var res Results
	if err := json.Unmarshal(b, &res); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if res.Baseline != nil {
		res.Baseline.Baseline = nil
	}
	return &res, nil
}

// tmpfsDir returns a fresh directory on /dev/shm, or one in the work
// directory when there is no tmpfs, and how to remove it.
func tmpfsDir(cfg *config) (string, func()) {
	if d, err := os.MkdirTemp("/dev/shm", "fence-bench-etcd-"); err == nil {
		return d, func() { os.RemoveAll(d) }
	}
	return filepath.Join(cfg.work, "etcd-data"), func() {}
}

// writeJSON writes v indented to path.
func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}
