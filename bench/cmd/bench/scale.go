package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/fence-dev/fence/bench/internal/stats"
)

// runScale is section 4: for each backend, one process holds and renews
// 10,000 leases (its CPU share and memory), and `fence list` runs over
// them; then the dashboard's frame time at 10,000 locks (tui's Go
// benchmarks).
func runScale(ctx context.Context, cfg *config, srv *etcdServer, res *Results) error {
	ttl := cfg.dur(15*time.Second, 3*time.Second)
	settle := cfg.dur(6*time.Second, 500*time.Millisecond)
	window := cfg.dur(20*time.Second, time.Second)
	stateDir := filepath.Join(cfg.work, "state-scale")
	runs := []struct {
		backend string
		n       int
		list    []string // fence list over the held locks (nil: none)
	}{
		{"etcd", cfg.size(10000, 300), []string{cfg.fence, "--endpoints", srv.endpoint, "list"}},
		// The coordinator fence run holds its lease with: etcd decorated by
		// the lease history. Its renewals must cost what the bare
		// backend's do (the decorator keeps coord.AsyncRenewer).
		{"etcd-history", cfg.size(10000, 300), nil},
		// The reference: the same number of etcd leases kept by etcd's own
		// client (concurrency.Mutex, one session each).
		{"etcd-session", cfg.size(10000, 300), nil},
		// Local renewals rewrite a lease record in place (no fsync):
		// 10,000 of them are measured as they are.
		{"local", cfg.size(10000, 100), []string{cfg.fence, "--state-dir", stateDir, "list"}},
	}
	for _, r := range runs {
		args := []string{"leases", "--backend", r.backend, "--n", fmt.Sprint(r.n), "--ttl", ttl.String(),
			"--settle", settle.String(), "--window", window.String()}
		switch r.backend {
		case "local":
			args = append(args, "--state-dir", stateDir, "--concurrency", "8")
		default:
			args = append(args, "--endpoints", srv.endpoint)
		}
		ls, listed, err := holdAndList(ctx, cfg, args, r.list, r.backend)
		if err != nil {
			return fmt.Errorf("%s: %w", r.backend, err)
		}
		cfg.logf("scale %s: %d leases, %.1f%% of one core, %d renewals in %.0fs, RSS %.0f MiB, %d lost",
			r.backend, ls.Leases, 100*ls.CPUShare, ls.Renewals, ls.WindowSeconds, ls.RSSMiB, ls.Lost)
		res.Scale.Leases = append(res.Scale.Leases, ls)
		if listed.S.N > 0 {
			res.Scale.List = append(res.Scale.List, listed)
		}
	}

	benchtime, count := "1s", 5
	if cfg.smoke {
		benchtime, count = "2x", 1
	}
	lines, err := goBench(ctx, cfg, "tui", "./tui", "^Benchmark(Tick)?Frame10k$", benchtime, count)
	if err != nil {
		return err
	}
	byName := map[string][]float64{}
	var names []string
	for _, l := range lines {
		if _, ok := byName[l.Name]; !ok {
			names = append(names, l.Name)
		}
		byName[l.Name] = append(byName[l.Name], l.Metrics["ns/op"]/1e6)
	}
	for _, nm := range names {
		res.Scale.Frame = append(res.Scale.Frame, Measure{Name: strings.TrimPrefix(nm, "Benchmark"), Unit: "ms", S: stats.Of(byName[nm])})
	}
	return nil
}

// holdAndList starts `bench leases`, waits for its measurement, then times
// `fence list` over the held locks while they are still held.
func holdAndList(ctx context.Context, cfg *config, leaseArgs, listArgv []string, backend string) (LeaseScale, Measure, error) {
	var ls LeaseScale
	cmd := exec.CommandContext(ctx, cfg.self, leaseArgs...)
	cmd.Env, cmd.Dir = cfg.env, cfg.work
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return ls, Measure{}, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return ls, Measure{}, err
	}
	errPath := filepath.Join(cfg.work, "leases-"+backend+".err")
	errf, err := os.Create(errPath)
	if err != nil {
		return ls, Measure{}, err
	}
	defer errf.Close()
	cmd.Stderr = errf
	if err := cmd.Start(); err != nil {
		return ls, Measure{}, err
	}
	defer func() {
		stdin.Close()
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	}()
	line := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<16), 1<<20)
		if sc.Scan() {
			line <- sc.Text()
		}
		close(line)
	}()
	select {
	case l, ok := <-line:
		if !ok {
			b, _ := os.ReadFile(errPath)
			return ls, Measure{}, fmt.Errorf("bench leases ended without a result: %s", strings.TrimSpace(string(b)))
		}
		if err := json.Unmarshal([]byte(l), &ls); err != nil {
			return ls, Measure{}, fmt.Errorf("bench leases printed %q: %w", l, err)
		}
	case <-time.After(5 * time.Minute):
		return ls, Measure{}, fmt.Errorf("bench leases did not report within 5 minutes")
	case <-ctx.Done():
		return ls, Measure{}, ctx.Err()
	}
	if ls.Lost > 0 {
		cfg.logf("scale %s: %d of %d leases were lost while held; first: %s", backend, ls.Lost, ls.Leases, ls.LostFirst)
	}
	if listArgv == nil {
		return ls, Measure{}, nil
	}

	// The list must show every held lock.
	jsonArgv := append(append([]string{}, listArgv...), "-o", "json")
	jc := exec.CommandContext(ctx, jsonArgv[0], jsonArgv[1:]...)
	jc.Env = cfg.env
	out, err := jc.Output()
	if err != nil {
		return ls, Measure{}, fmt.Errorf("%s: %w", strings.Join(jsonArgv, " "), err)
	}
	var infos []struct {
		Held bool `json:"held"`
	}
	if err := json.Unmarshal(out, &infos); err != nil {
		return ls, Measure{}, fmt.Errorf("fence list -o json: %w", err)
	}
	held := 0
	for _, i := range infos {
		if i.Held {
			held++
		}
	}
	if held < ls.Leases-ls.Lost {
		return ls, Measure{}, fmt.Errorf("fence list shows %d held locks, want %d", held, ls.Leases-ls.Lost)
	}
	name := "fence list (" + backend + ")"
	cmds := []hfCommand{{name, listArgv}}
	times, err := hyperfine(ctx, cfg, "list-"+backend, cmds, 1, cfg.size(10, 2), 1)
	if err != nil {
		return ls, Measure{}, err
	}
	m := measures(cmds, times)[0]
	m.Cmd += fmt.Sprintf("  # %d locks, piped (tab-separated)", held)
	return ls, m, nil
}
