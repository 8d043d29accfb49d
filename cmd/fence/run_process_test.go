package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	st "github.com/fence-dev/fence/cmd/fence/internal/scripttest"
)

// The cases of `fence run` that a script cannot order: a waiter must be in
// the queue before the next step. The rest is in testdata/script/run_*.txtar.

// startRun starts `fence run ARGS...` with env, its stderr collected, and
// returns it with its stdout lines.
func startRun(t *testing.T, env []string, args ...string) (*exec.Cmd, <-chan string, *strings.Builder) {
	t.Helper()
	cmd := exec.Command("fence", append([]string{"run"}, args...)...)
	cmd.Env = env
	stderr := &strings.Builder{}
	cmd.Stderr = stderr
	return cmd, st.Lines(t, cmd), stderr
}

// TestRunInterruptedWhileWaiting: SIGTERM, SIGINT and SIGHUP end a `fence
// run` that waits for the lock with 128+N and one line; its command never
// runs, it leaves the queue and the holder keeps the lock.
func TestRunInterruptedWhileWaiting(t *testing.T) {
	dir := t.TempDir()
	env := st.Env(dir)
	st.Output(t, env, "acquire", "busy", "--ttl", "1m", "--holder", "alice")
	ran := filepath.Join(dir, "ran")
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP} {
		cmd, _, stderr := startRun(t, env, "busy", "--", "touch", ran)
		waitForWaiters(t, env, "busy", 1)
		if err := cmd.Process.Signal(sig); err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprintf("fence: interrupted by %s while waiting for \"busy\"\n", unix.SignalName(sig))
		if code := st.ExitCode(t, cmd); code != 128+int(sig) || stderr.String() != want {
			t.Fatalf("%v: exit %d, stderr %q; want %d and %q", sig, code, stderr.String(), 128+int(sig), want)
		}
		waitForWaiters(t, env, "busy", 0)
	}
	if _, err := os.Stat(ran); err == nil {
		t.Fatal("the command of an interrupted wait ran")
	}
	out := st.Output(t, env, "status", "busy")
	if !strings.Contains(out, "holder:      alice\n") || !strings.Contains(out, "token:       1\n") {
		t.Fatalf("the holder changed:\n%s", out)
	}
}

// TestRunWaitersServedInOrder: runs that wait for a lock get it first come,
// first served, each with the next token; --verbose says for whom each one
// waits.
func TestRunWaitersServedInOrder(t *testing.T) {
	dir := t.TempDir()
	env := st.Env(dir)
	first := st.Output(t, env, "acquire", "q", "--ttl", "1m", "--holder", "first", "-o", "env")
	log := filepath.Join(dir, "log")
	type waiter struct {
		cmd    *exec.Cmd
		stderr *strings.Builder
	}
	var ws []waiter
	for i := range 3 {
		name := fmt.Sprintf("w%d", i)
		cmd, _, stderr := startRun(t, env, "q", "-v", "--holder", name, "--wait", "25s", "--",
			"sh", "-c", `echo "$FENCE_HOLDER $FENCE_TOKEN" >> "$0"`, log)
		ws = append(ws, waiter{cmd, stderr})
		waitForWaiters(t, env, "q", i+1) // in the queue before the next one comes
	}
	st.Output(t, env, "release", "q", "--lease", st.LeaseID(first))
	for i, w := range ws {
		if code := st.ExitCode(t, w.cmd); code != 0 {
			t.Fatalf("waiter %d exited %d: %s", i, code, w.stderr)
		}
		if !strings.Contains(w.stderr.String(), "fence: waiting for \"q\", held by first (token 1)\n") {
			t.Errorf("waiter %d did not say whom it waits for: %q", i, w.stderr)
		}
	}
	b, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(b), "w0 2\nw1 3\nw2 4\n"; got != want {
		t.Fatalf("served in the order (holder token)\n%swant\n%s", got, want)
	}
}

// TestRunKilledFreesLock: when fence is killed with SIGKILL, its command's
// group dies with it, and on the local coordinator the next run takes the
// lock over at once (a lease whose processes are all gone), not after its
// TTL, with a larger token.
func TestRunKilledFreesLock(t *testing.T) {
	dir := t.TempDir()
	env := st.Env(dir)
	pidFile := filepath.Join(dir, "pids")
	cmd, _, _ := startRun(t, env, "k", "--ttl", "1m", "--",
		"sh", "-c", `sleep 60 & echo "$$ $! $FENCE_TOKEN" > "$0.tmp" && mv "$0.tmp" "$0"; wait`, pidFile)
	fields := strings.Fields(waitFileContent(t, pidFile))
	if len(fields) != 3 {
		t.Fatalf("pids file: %q", fields)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	if code := st.ExitCode(t, cmd); code != -1 {
		t.Fatalf("fence exited %d, want killed", code)
	}
	for _, f := range fields[:2] {
		pid, _ := strconv.Atoi(f)
		waitGone(t, pid)
	}
	start := time.Now()
	c := exec.Command("fence", "run", "k", "-n", "--", "sh", "-c", `echo "$FENCE_TOKEN"`)
	c.Env = env
	out, err := c.Output()
	if err != nil {
		t.Fatalf("next run on the lock: %v (%s)", err, out)
	}
	if old, _ := strconv.Atoi(fields[2]); strings.TrimSpace(string(out)) != strconv.Itoa(old+1) {
		t.Fatalf("next token %q, want %d", out, old+1)
	}
	if d := time.Since(start); d > 30*time.Second { // hang guard; the TTL is 1m
		t.Fatalf("took %v", d)
	}
}

// TestRunInheritsStdio: the command's standard streams are fence's own
// files, not pipes through fence.
func TestRunInheritsStdio(t *testing.T) {
	dir := t.TempDir()
	env := st.Env(dir)
	files := make([]*os.File, 3)
	for i, name := range []string{"in", "out", "err"} {
		f, err := os.OpenFile(filepath.Join(dir, name), os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		files[i] = f
	}
	cmd := exec.Command("fence", "run", "io", "--", "sh", "-c",
		`readlink /proc/$$/fd/0; readlink /proc/$$/fd/1; readlink /proc/$$/fd/2 >&2`)
	cmd.Env = env
	cmd.Stdin, cmd.Stdout, cmd.Stderr = files[0], files[1], files[2]
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	out, _ := os.ReadFile(files[1].Name())
	errOut, _ := os.ReadFile(files[2].Name())
	want := files[0].Name() + "\n" + files[1].Name() + "\n"
	if string(out) != want || string(errOut) != files[2].Name()+"\n" {
		t.Fatalf("stdout %q, stderr %q; want %q and %q", out, errOut, want, files[2].Name()+"\n")
	}
}

// waitFileContent waits for path to exist and returns its content.
func waitFileContent(t *testing.T, path string) string {
	t.Helper()
	deadline := time.Now().Add(st.HangGuard)
	for time.Now().Before(deadline) {
		if b, err := os.ReadFile(path); err == nil {
			return string(b)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("%s never appeared", path)
	return ""
}

// waitGone waits until pid no longer exists (nor is a zombie).
func waitGone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(st.HangGuard)
	for time.Now().Before(deadline) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return
		}
		if s := string(b); strings.Contains(s[strings.LastIndexByte(s, ')'):], ") Z ") {
			return // dead; its parent has not reaped it yet
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("process %d of the command survived fence's SIGKILL", pid)
}
