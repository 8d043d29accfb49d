package local

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"
	"go.uber.org/goleak"

	"github.com/fence-dev/fence/pkg/coord"
)

// The test binary doubles as a helper process: with helperEnv set it runs
// one helper (runHelper) and exits instead of running tests. A helper exits
// when its stdin closes, so none outlives its test.
const helperEnv = "FENCE_LOCAL_TEST_HELPER"

func TestMain(m *testing.M) {
	if args := os.Getenv(helperEnv); args != "" {
		os.Exit(helperMain(args))
	}
	goleak.VerifyTestMain(m)
}

// guard bounds waits that should end much sooner: it only turns a hang into
// a failure.
const guard = 30 * time.Second

func helperMain(raw string) int {
	var args []string
	if err := json.Unmarshal([]byte(raw), &args); err != nil || len(args) < 3 {
		fmt.Fprintf(os.Stderr, "helper: bad args %q\n", raw)
		return 2
	}
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		os.Exit(0)
	}()
	c, err := open(args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 2
	}
	if err := runHelper(c, args[0], args[2], args[3:]); err != nil {
		fmt.Fprintf(os.Stderr, "helper %v: %v\n", args, err)
		return 1
	}
	return 0
}

func say(format string, args ...any) { fmt.Fprintf(os.Stdout, format+"\n", args...) }

// runHelper runs one helper on lock name:
//
//	contend NAME ROUNDS LOG     acquire/release ROUNDS times, logging B/E lines to LOG
//	hold NAME TTL [process]     acquire, say "acquired TOKEN", block
//	wait NAME TTL [process]     as hold, saying "queued" from OnWait first
//	supervise NAME TTL          acquire attached to this process, start `sleep` in its
//	                            own group, attach it, say "ready TOKEN SLEEPPID", block
//	attached NAME TTL PID PGID  acquire attached to other processes, say "acquired TOKEN", block
//	try NAME WAIT               acquire with that wait, say "acquired TOKEN" or "error ERR"
//	cycle NAME                  acquire/release for ever, saying "T TOKEN" after each grant
func runHelper(c *coordinator, mode, name string, args []string) error {
	ctx := context.Background()
	holder := fmt.Sprintf("helper-%s-%d", mode, os.Getpid())
	self := &coord.ProcessInfo{PIDs: []int{os.Getpid()}}
	ttlArg := func() time.Duration {
		d, _ := time.ParseDuration(args[0])
		return d
	}
	block := func() error { select {} }
	switch mode {
	case "contend":
		rounds, _ := strconv.Atoi(args[0])
		return contend(ctx, c, name, rounds, args[1], holder)
	case "hold", "wait":
		o := coord.AcquireOptions{TTL: ttlArg(), Holder: holder, Wait: coord.WaitForever}
		if len(args) > 1 && args[1] == "process" {
			o.Process = self
		}
		if mode == "wait" {
			o.OnWait = func(coord.LockInfo) { say("queued") }
		}
		l, err := c.Acquire(ctx, name, o)
		if err != nil {
			return err
		}
		say("acquired %d", l.Token)
		return block()
	case "waitexit":
		// Queue, take the lock, close the coordinator at once (before the
		// ring of the waiters behind is due) and exit without a release.
		l, err := c.Acquire(ctx, name, coord.AcquireOptions{TTL: ttlArg(), Holder: holder, Wait: coord.WaitForever,
			OnWait: func(coord.LockInfo) { say("queued") }})
		if err != nil {
			return err
		}
		c.Close()
		say("closed %d", l.Token)
		return nil
	case "supervise":
		l, err := c.Acquire(ctx, name, coord.AcquireOptions{TTL: ttlArg(), Holder: holder, Wait: coord.WaitForever, Process: self})
		if err != nil {
			return err
		}
		cmd := exec.Command("sleep", "1000")
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := cmd.Start(); err != nil {
			return err
		}
		if err := c.AttachProcess(ctx, name, l.ID, coord.ProcessInfo{PGID: cmd.Process.Pid}); err != nil {
			return err
		}
		say("ready %d %d", l.Token, cmd.Process.Pid)
		return block()
	case "attached":
		pid, _ := strconv.Atoi(args[1])
		pgid, _ := strconv.Atoi(args[2])
		l, err := c.Acquire(ctx, name, coord.AcquireOptions{TTL: ttlArg(), Holder: holder, Wait: 0,
			Process: &coord.ProcessInfo{PIDs: []int{pid}, PGID: pgid}})
		if err != nil {
			return err
		}
		say("acquired %d", l.Token)
		return block()
	case "try":
		w := coord.WaitForever
		if args[0] != "forever" {
			w, _ = time.ParseDuration(args[0])
		}
		l, err := c.Acquire(ctx, name, coord.AcquireOptions{TTL: time.Minute, Holder: holder, Wait: w})
		if err != nil {
			say("error %v", err)
		} else {
			say("acquired %d", l.Token)
		}
		return block()
	case "cycle":
		for {
			l, err := c.Acquire(ctx, name, coord.AcquireOptions{TTL: time.Minute, Holder: holder, Wait: coord.WaitForever, Process: self})
			if err != nil {
				return err
			}
			say("T %d", l.Token)
			if err := c.Release(ctx, name, l.ID); err != nil {
				return err
			}
		}
	}
	return fmt.Errorf("unknown helper %q", mode)
}

// contend takes the lock rounds times and logs "B TOKEN WHO" on entry and
// "E TOKEN WHO" on exit, each with one O_APPEND write.
func contend(ctx context.Context, c coord.Coordinator, name string, rounds int, log, who string) error {
	f, err := os.OpenFile(log, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	for i := 0; i < rounds; i++ {
		l, err := c.Acquire(ctx, name, coord.AcquireOptions{TTL: guard, Holder: who, Wait: coord.WaitForever})
		if err != nil {
			return fmt.Errorf("%s: acquire: %w", who, err)
		}
		if _, err := fmt.Fprintf(f, "B %d %s\n", l.Token, who); err != nil {
			return err
		}
		time.Sleep(time.Millisecond)
		if _, err := fmt.Fprintf(f, "E %d %s\n", l.Token, who); err != nil {
			return err
		}
		if err := c.Release(ctx, name, l.ID); err != nil {
			return fmt.Errorf("%s: release: %w", who, err)
		}
	}
	return nil
}

// helper is a running helper process.
type helper struct {
	t     testing.TB
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string
}

// spawn starts a helper on state directory dir. cred, when set, runs it as
// another user (the test binary is then copied where that user can run it).
func spawn(t testing.TB, cred *syscall.Credential, mode, dir, name string, args ...string) *helper {
	t.Helper()
	b, _ := json.Marshal(append([]string{mode, dir, name}, args...))
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if cred != nil {
		exe = copyExecutable(t)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+string(b))
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	h := &helper{t: t, cmd: cmd, stdin: stdin, lines: make(chan string, 1024)}
	go func() {
		defer close(h.lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			h.lines <- sc.Text()
		}
	}()
	t.Cleanup(h.kill)
	return h
}

// next returns the helper's next line, failing the test at the guard.
func (h *helper) next(what string) string {
	h.t.Helper()
	select {
	case l, ok := <-h.lines:
		if !ok {
			h.t.Fatalf("helper exited while waiting for %s", what)
		}
		return l
	case <-time.After(guard):
		h.t.Fatalf("helper: no %s within %v", what, guard)
	}
	return ""
}

// expect reads the next line and checks its first word.
func (h *helper) expect(word string) []string {
	h.t.Helper()
	f := strings.Fields(h.next(word))
	if len(f) == 0 || f[0] != word {
		h.t.Fatalf("helper said %q, want %q", f, word)
	}
	return f
}

func (h *helper) signal(sig syscall.Signal) {
	h.t.Helper()
	if err := h.cmd.Process.Signal(sig); err != nil {
		h.t.Fatalf("signal %v: %v", sig, err)
	}
}

// kill kills and reaps the helper (idempotent).
func (h *helper) kill() {
	_ = h.cmd.Process.Signal(syscall.SIGKILL)
	h.stdin.Close()
	_ = h.cmd.Wait()
	for range h.lines {
	}
}

// sharedTempDir returns a temporary directory (0755, in a 0755 parent) that
// another user can reach.
func sharedTempDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "localtest")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	sub := filepath.Join(dir, "state")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	return sub
}

// copyExecutable copies the test binary where another user can run it.
func copyExecutable(t testing.TB) string {
	t.Helper()
	dir := sharedTempDir(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "helper")
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return bin
}

// tctx is a context that ends at the guard or with the test.
func tctx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	t.Cleanup(cancel)
	return ctx
}

type execCmd = exec.Cmd

var execCommand = exec.Command

func failingWatcher() (*fsnotify.Watcher, error) { return nil, errors.New("no inotify") }

// newDir returns a fresh state directory path (not yet created).
func newDir(t testing.TB) string { return filepath.Join(t.TempDir(), "state") }

// open is Open with the concrete type.
func open(dir string) (*coordinator, error) {
	c, err := Open(dir)
	if err != nil {
		return nil, err
	}
	return c.(*coordinator), nil
}
