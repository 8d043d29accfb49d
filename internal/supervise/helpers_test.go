//go:build linux

package supervise_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"golang.org/x/sys/unix"

	"github.com/fence-dev/fence/internal/clock"
	"github.com/fence-dev/fence/internal/etcdtest"
	"github.com/fence-dev/fence/internal/exitcode"
	"github.com/fence-dev/fence/internal/proc"
	"github.com/fence-dev/fence/internal/supervise"
	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/coord/etcd"
	"github.com/fence-dev/fence/pkg/coord/local"
)

// hang bounds every wait; it is never a timing assertion.
const hang = 30 * time.Second

// backend is a coordinator under test and how a fence subprocess reaches it.
type backend struct {
	name      string
	c         coord.Coordinator
	stateDir  string
	endpoints []string
}

func localBackend(t *testing.T) *backend {
	t.Helper()
	dir := t.TempDir()
	c, err := local.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &backend{name: "local", c: c, stateDir: dir}
}

func etcdBackend(t *testing.T) *backend {
	t.Helper()
	srv := etcdtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), hang)
	defer cancel()
	c, err := etcd.New(ctx, srv.Endpoints(), etcd.WithPrefix("/fence-test/"), etcd.WithDialTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &backend{name: "etcd", c: c, endpoints: srv.Endpoints()}
}

var backends = []struct {
	name string
	open func(*testing.T) *backend
}{{"local", localBackend}, {"etcd", etcdBackend}}

// location is what a command needs to reach the backend.
func (b *backend) location() map[string]string {
	if b.stateDir != "" {
		return map[string]string{"FENCE_STATE_DIR": b.stateDir}
	}
	return map[string]string{"FENCE_ENDPOINTS": strings.Join(b.endpoints, ","), "FENCE_PREFIX": "/fence-test/"}
}

// run runs fence in this process.
func run(t *testing.T, b *backend, o supervise.Options) (int, error) {
	t.Helper()
	if o.Location == nil {
		o.Location = b.location()
	}
	ctx, cancel := context.WithTimeout(context.Background(), hang)
	defer cancel()
	return supervise.Run(ctx, b.c, o)
}

// fenceProc is fence running as a process of its own (the test binary in
// its fence part).
type fenceProc struct {
	cmd    *exec.Cmd
	stderr bytes.Buffer
	done   chan struct{}
	code   int
}

func startFence(t *testing.T, b *backend, o supervise.Options) *fenceProc {
	t.Helper()
	if o.Location == nil {
		o.Location = b.location()
	}
	return spawnFence(t, fenceEnv, fenceConfig{StateDir: b.stateDir, Endpoints: b.endpoints, Opts: o})
}

// spawnFence runs the test binary as a fence helper process: env names the
// helper mode, cfg (JSON) its configuration. It is killed at cleanup.
func spawnFence(t *testing.T, env string, cfg any) *fenceProc {
	t.Helper()
	b, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	f := &fenceProc{done: make(chan struct{})}
	f.cmd = exec.Command(os.Args[0])
	f.cmd.Env = append(os.Environ(), env+"="+string(b))
	f.cmd.Stderr = &f.stderr
	f.cmd.Stdout = os.Stdout
	// A process group of its own, as a shell's job or timeout(1) gives it:
	// the tests may signal the whole group.
	f.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := f.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		_ = f.cmd.Wait()
		f.code = f.cmd.ProcessState.ExitCode()
		close(f.done)
	}()
	t.Cleanup(func() {
		_ = f.cmd.Process.Signal(syscall.SIGCONT)
		_ = f.cmd.Process.Kill()
		<-f.done
	})
	return f
}

// wait waits for fence to exit and returns its exit code.
func (f *fenceProc) wait(t *testing.T) int {
	t.Helper()
	select {
	case <-f.done:
		return f.code
	case <-time.After(hang):
		t.Fatalf("fence did not exit; stderr:\n%s", f.stderr.String())
		return -1
	}
}

// expectLost waits for fence to exit and checks that it exited 76 with one
// line on stderr that contains phrase.
func (f *fenceProc) expectLost(t *testing.T, phrase string) {
	t.Helper()
	if code := f.wait(t); code != exitcode.LeaseLost {
		t.Fatalf("fence exited %d, want 76; stderr:\n%s", code, f.stderr.String())
	}
	if msg := f.stderr.String(); strings.Count(msg, "\n") != 1 || !strings.Contains(msg, phrase) {
		t.Fatalf("stderr should be one line containing %q:\n%s", phrase, msg)
	}
}

// waitFile waits until path exists with a complete last line and returns its
// lines.
func waitFile(t *testing.T, path string, lines int) []string {
	t.Helper()
	end := time.Now().Add(hang)
	for time.Now().Before(end) {
		b, err := os.ReadFile(path)
		if err == nil && bytes.HasSuffix(b, []byte("\n")) {
			if l := strings.Split(strings.TrimSpace(string(b)), "\n"); len(l) >= lines {
				return l
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("%s did not get %d lines", path, lines)
	return nil
}

// pids reads PIDs, one per line.
func pids(t *testing.T, lines []string) []int {
	t.Helper()
	var out []int
	for _, l := range lines {
		pid, err := strconv.Atoi(strings.TrimSpace(l))
		if err != nil {
			t.Fatalf("bad pid line %q", l)
		}
		out = append(out, pid)
	}
	return out
}

// deathWatch reports when a process (not necessarily a child) ends, through
// a pidfd: the instant is read on the boot clock as the poll returns.
type deathWatch struct {
	pid  int
	died chan clock.Boot
}

func watchDeath(t *testing.T, pid int) *deathWatch {
	t.Helper()
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		t.Fatalf("pidfd_open %d: %v", pid, err)
	}
	d := &deathWatch{pid: pid, died: make(chan clock.Boot, 1)}
	go func() {
		defer unix.Close(fd)
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		for {
			n, err := unix.Poll(fds, -1)
			if errors.Is(err, unix.EINTR) {
				continue
			}
			if n > 0 || err != nil {
				d.died <- clock.Now()
				return
			}
		}
	}()
	return d
}

func (d *deathWatch) wait(t *testing.T) clock.Boot {
	t.Helper()
	select {
	case at := <-d.died:
		d.died <- at
		return at
	case <-time.After(hang):
		t.Fatalf("process %d did not die", d.pid)
		return 0
	}
}

// alive reports whether pid runs (a zombie has ended).
func alive(pid int) bool {
	st, err := proc.ReadStat(pid)
	return err == nil && !st.Gone()
}

// assertAllDead fails for every process of pids still running now.
func assertAllDead(t *testing.T, pids []int) {
	t.Helper()
	for _, pid := range pids {
		if alive(pid) {
			t.Errorf("process %d of the command's tree survived", pid)
			_ = unix.Kill(pid, syscall.SIGKILL)
		}
	}
}

// waitAllDead waits (hang-bounded) for pids to end.
func waitAllDead(t *testing.T, pids []int) {
	t.Helper()
	end := time.Now().Add(hang)
	for time.Now().Before(end) {
		n := 0
		for _, pid := range pids {
			if alive(pid) {
				n++
			}
		}
		if n == 0 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	assertAllDead(t, pids)
}

// shell quotes s for /bin/sh.
func shell(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func tempPath(t *testing.T, name string) string { return filepath.Join(t.TempDir(), name) }

func procStat(pid int) (proc.Stat, error) { return proc.ReadStat(pid) }

// parseMetrics reads a textfile with the Prometheus text parser and returns
// each sample's value by metric name; every sample must carry a lock label.
func parseMetrics(t *testing.T, path string) map[string]float64 {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(f)
	if err != nil {
		t.Fatalf("parse %s: %v", path, err)
	}
	out := map[string]float64{}
	for name, fam := range fams {
		for _, m := range fam.GetMetric() {
			hasLock := false
			for _, l := range m.GetLabel() {
				hasLock = hasLock || (l.GetName() == "lock" && l.GetValue() != "")
			}
			if !hasLock {
				t.Errorf("%s has no lock label", name)
			}
			switch {
			case m.GetGauge() != nil:
				out[name] = m.GetGauge().GetValue()
			case m.GetCounter() != nil:
				out[name] = m.GetCounter().GetValue()
			}
		}
	}
	return out
}

func descendantsOf(t *testing.T, pid int) []int {
	t.Helper()
	ds, err := proc.Descendants(pid)
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for _, d := range ds {
		out = append(out, d.PID)
	}
	return out
}
