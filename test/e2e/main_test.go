package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fence-dev/fence/internal/etcdtest"
	"github.com/fence-dev/fence/internal/proc"
	"github.com/fence-dev/fence/internal/syncbuf"
	"github.com/fence-dev/fence/pkg/guard/sqlguard/pgtest"
)

// The programs TestMain builds: the fence binary, and the command the tests
// run under it (internal/e2ehelper).
var (
	fenceBin  string
	helperBin string
)

// hangGuard bounds every wait of these tests. It is never an assertion on
// timing: it only turns a hang into a failure.
const hangGuard = 90 * time.Second

// TestMain builds fence and the helper once, runs the tests, and fails when
// a process started by a test outlived it.
func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "fence-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	fenceBin, helperBin = filepath.Join(dir, "fence"), filepath.Join(dir, "e2ehelper")
	for bin, pkg := range map[string]string{
		fenceBin:  "github.com/fence-dev/fence/cmd/fence",
		helperBin: "github.com/fence-dev/fence/test/e2e/internal/e2ehelper",
	} {
		cmd := exec.Command(goTool(), "build", "-o", bin, pkg)
		if out, err := cmd.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "e2e: go build %s: %v\n%s", pkg, err, out)
			return 1
		}
	}
	code := m.Run()
	if left := strays(); len(left) > 0 {
		fmt.Fprintf(os.Stderr, "e2e: processes left behind by the tests (killed now): %v\n", left)
		if code == 0 {
			code = 1
		}
	}
	return code
}

// goTool is the go command on $PATH, else /usr/local/go/bin/go.
func goTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return "/usr/local/go/bin/go"
}

// strays kills and returns the live descendants of this process.
func strays() []int {
	ds, _ := proc.Descendants(os.Getpid())
	var left []int
	for _, d := range ds {
		if !d.Gone() {
			left = append(left, d.PID)
			_ = signalID(d.ID(), syscall.SIGKILL)
		}
	}
	return left
}

// backend is a coordinator for fence processes: the environment that
// selects it.
type backend struct {
	name string
	env  []string
}

// cleanEnv is this process's environment without FENCE_ and E2E_
// variables, with a configuration directory of the test's (so that no
// config file of the machine's user applies), plus extra.
func cleanEnv(t *testing.T, extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); !strings.HasPrefix(k, "FENCE_") && !strings.HasPrefix(k, "E2E_") &&
			k != "XDG_CONFIG_HOME" {
			env = append(env, kv)
		}
	}
	env = append(env, "XDG_CONFIG_HOME="+t.TempDir(), "E2E_FENCE="+fenceBin)
	return append(env, extra...)
}

// etcdBackend starts an embedded etcd server for the test; fence processes
// reach it through FENCE_ENDPOINTS.
func etcdBackend(t *testing.T) backend {
	srv := etcdtest.Start(t)
	return backend{name: "etcd", env: cleanEnv(t, "FENCE_ENDPOINTS="+strings.Join(srv.Endpoints(), ","), "FENCE_PREFIX=/e2e/")}
}

// localBackend is the local coordinator with its state in a temporary
// directory.
func localBackend(t *testing.T) backend {
	return backend{name: "local", env: cleanEnv(t, "FENCE_STATE_DIR="+filepath.Join(t.TempDir(), "state"))}
}

// pgBackend starts a PostgreSQL server for the test (skipped when it is not
// installed); fence processes reach it through FENCE_POSTGRES.
func pgBackend(t *testing.T) backend {
	pg := pgtest.Start(t)
	return backend{name: "postgres", env: cleanEnv(t, "FENCE_POSTGRES="+pg.URL(pg.CreateDatabase(t)))}
}

// fenceProc is a running fence process started by a test.
type fenceProc struct {
	cmd    *exec.Cmd
	stderr *syncbuf.Buffer // fence's stdout and stderr
	done   chan struct{}
	code   int // exit code, -1 when killed by a signal; valid after done
}

// startFence starts fence with args in its own process group (so that the
// tests' signals never reach the test process), dying with this process.
// The test's cleanup kills what is left of its tree.
func startFence(t *testing.T, env []string, args ...string) *fenceProc {
	t.Helper()
	p, err := spawnFence(env, args...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.kill)
	return p
}

// spawnFence starts fence like startFence, for callers off the test's
// goroutine; the caller kills it (fenceProc.kill) when it must not outlive
// the test.
func spawnFence(env []string, args ...string) (*fenceProc, error) {
	cmd := exec.Command(fenceBin, args...)
	cmd.Env = env
	stderr := &syncbuf.Buffer{}
	cmd.Stdout = stderr
	cmd.Stderr = stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start fence: %w", err)
	}
	p := &fenceProc{cmd: cmd, stderr: stderr, done: make(chan struct{})}
	go func() {
		err := cmd.Wait()
		p.code = cmd.ProcessState.ExitCode()
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			p.code = -2
		}
		close(p.done)
	}()
	return p, nil
}

// kill SIGKILLs fence and every descendant (stopped ones too) and waits
// for fence.
func (p *fenceProc) kill() {
	select {
	case <-p.done:
		return
	default:
	}
	if ds, err := proc.Descendants(p.cmd.Process.Pid); err == nil {
		for _, d := range ds {
			_ = signalID(d.ID(), syscall.SIGKILL)
		}
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL) // through a pidfd: never another process
	<-p.done
}

// wait waits for fence to exit, up to the hang guard, and returns its exit
// code and output.
func (p *fenceProc) wait(t *testing.T) (int, string) {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(hangGuard):
		p.kill()
		t.Fatalf("fence %v did not exit within %v; killed. Output:\n%s", p.cmd.Args[1:], hangGuard, p.stderr)
	}
	return p.code, p.stderr.String()
}

// exited reports whether fence has exited.
func (p *fenceProc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// signalID sends sig to the process id through a pidfd, only when the
// process holding id.PID still has id's start time (never a reused PID).
func signalID(id proc.ID, sig syscall.Signal) error {
	fd, err := unix.PidfdOpen(id.PID, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if st, err := proc.ReadStat(id.PID); err != nil || st.Start != id.Start {
		return proc.ErrNoProcess
	}
	return unix.PidfdSendSignal(fd, sig, nil, 0)
}

// signalGroup sends sig to every live member of the process group led (at
// its start) by leader.
func signalGroup(leader proc.ID, sig syscall.Signal) (int, error) {
	ids, err := proc.GroupMembers(leader.PID, leader)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, id := range ids {
		if signalID(id, sig) == nil {
			n++
		}
	}
	return n, nil
}

// holderTree is a `fence run` holding its lease: fence, its watchdog and the
// command (the leader of the command's process group).
type holderTree struct {
	fence, watchdog, command proc.ID
}

// treeOf finds the watchdog and the command of a fence run from the
// command's PID: its parent is the watchdog, whose parent is fence.
func treeOf(fencePID, commandPID int) (holderTree, error) {
	cst, err := proc.ReadStat(commandPID)
	if err != nil {
		return holderTree{}, fmt.Errorf("command %d: %w", commandPID, err)
	}
	wst, err := proc.ReadStat(cst.PPID)
	if err != nil {
		return holderTree{}, fmt.Errorf("watchdog %d: %w", cst.PPID, err)
	}
	fst, err := proc.ReadStat(fencePID)
	if err != nil {
		return holderTree{}, fmt.Errorf("fence %d: %w", fencePID, err)
	}
	switch {
	case wst.PPID != fencePID:
		return holderTree{}, fmt.Errorf("the command's parent %d is not a child of fence %d", wst.PID, fencePID)
	case cst.PGID != cst.PID:
		return holderTree{}, fmt.Errorf("the command %d does not lead its own process group (pgid %d)", cst.PID, cst.PGID)
	case cst.Gone() || wst.Gone() || fst.Gone():
		return holderTree{}, fmt.Errorf("part of the tree is gone: fence %c, watchdog %c, command %c", fst.State, wst.State, cst.State)
	}
	return holderTree{fence: fst.ID(), watchdog: wst.ID(), command: cst.ID()}, nil
}

// freeze stops the whole tree: the watchdog first (it is the one that would
// stop the command on time), then fence, then the command's group.
func (h holderTree) freeze() error {
	for _, id := range []proc.ID{h.watchdog, h.fence} {
		if err := signalID(id, syscall.SIGSTOP); err != nil {
			return fmt.Errorf("SIGSTOP %d: %w", id.PID, err)
		}
	}
	if n, err := signalGroup(h.command, syscall.SIGSTOP); err != nil || n == 0 {
		return fmt.Errorf("SIGSTOP the command's group %d: %d signalled, %v", h.command.PID, n, err)
	}
	return nil
}

// waitStopped waits until every process of ids is stopped (the kernel
// delivers SIGSTOP asynchronously).
func waitStopped(ids ...proc.ID) error {
	deadline := time.Now().Add(hangGuard)
	for {
		all := true
		for _, id := range ids {
			switch proc.Check(id) {
			case proc.Gone:
				return fmt.Errorf("process %d is gone", id.PID)
			case proc.Running:
				all = false
			}
		}
		if all {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("processes %v not stopped within %v", ids, hangGuard)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitJSON waits for the file path (written atomically by the helper) and
// decodes it into v. It gives up when stop is closed first (the process
// that should write it has exited) or after the hang guard.
func waitJSON(ctx context.Context, path string, stop <-chan struct{}, v any) error {
	deadline := time.NewTimer(hangGuard)
	defer deadline.Stop()
	for {
		b, err := os.ReadFile(path)
		if err == nil {
			return json.Unmarshal(b, v)
		}
		select {
		case <-stop:
			if b, err := os.ReadFile(path); err == nil {
				return json.Unmarshal(b, v)
			}
			return fmt.Errorf("%s: never written (its writer exited)", filepath.Base(path))
		case <-deadline.C:
			return fmt.Errorf("%s: not written within %v", filepath.Base(path), hangGuard)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}
