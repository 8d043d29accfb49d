package scripttest

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/rogpeppe/go-internal/testscript"
	"golang.org/x/sys/unix"
)

// Background processes of a script, for the commands start, signal and
// expectbg: testscript's own `exec ... &` cannot send SIGTERM or SIGHUP, nor
// report an exact exit code.
var (
	bgMu   sync.Mutex
	bgRuns = map[*testscript.TestScript]map[string]*bgProc{}
)

type bgProc struct {
	cmd            *exec.Cmd
	stdout, stderr strings.Builder
	done           chan struct{}
	err            error
}

// cmdStart: start NAME PROGRAM [ARGS...] runs PROGRAM in the background
// under NAME, in the script's directory and environment, with its output
// kept for expectbg. It is killed at the end of the script if still running.
func cmdStart(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 2 {
		ts.Fatalf("usage: start NAME PROGRAM [ARGS...]")
	}
	name := args[0]
	bgMu.Lock()
	procs := bgRuns[ts]
	if procs == nil {
		procs = map[string]*bgProc{}
		bgRuns[ts] = procs
		ts.Defer(func() { killAll(ts) })
	}
	_, dup := procs[name]
	bgMu.Unlock()
	if dup {
		ts.Fatalf("start: %s is already running", name)
	}
	path, err := lookPath(ts, args[1])
	if err != nil {
		ts.Fatalf("start: %v", err)
	}
	p := &bgProc{done: make(chan struct{})}
	p.cmd = exec.Command(path, args[2:]...)
	p.cmd.Args[0] = args[1]
	p.cmd.Dir = ts.MkAbs(".")
	p.cmd.Env = environ(ts)
	p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
	p.cmd.WaitDelay = time.Second // a leftover grandchild may hold the pipes
	if err := p.cmd.Start(); err != nil {
		ts.Fatalf("start: %v", err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	bgMu.Lock()
	procs[name] = p
	bgMu.Unlock()
}

// cmdSignal: signal NAME SIG sends SIG (TERM, SIGHUP, 9, ...) to the
// background process NAME.
func cmdSignal(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: signal NAME SIG")
	}
	p := bgLookup(ts, args[0])
	sig := signalNum(args[1])
	if sig == 0 {
		ts.Fatalf("signal: unknown signal %q", args[1])
	}
	if err := p.cmd.Process.Signal(sig); err != nil {
		ts.Fatalf("signal %s: %v", args[0], err)
	}
}

// cmdExpectBg: expectbg CODE NAME waits (within HangGuard) for the
// background process NAME and checks its exit code as expect does; its
// stdout and stderr can then be checked.
func cmdExpectBg(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: expectbg CODE NAME")
	}
	want, err := strconv.Atoi(args[0])
	if err != nil {
		ts.Fatalf("expectbg: bad code %q", args[0])
	}
	p := bgLookup(ts, args[1])
	select {
	case <-p.done:
	case <-time.After(HangGuard):
		ts.Fatalf("%s did not exit within %v", args[1], HangGuard)
	}
	bgMu.Lock()
	delete(bgRuns[ts], args[1])
	bgMu.Unlock()
	ts.Stdout().Write([]byte(p.stdout.String()))
	ts.Stderr().Write([]byte(p.stderr.String()))
	got := 0
	if p.err != nil {
		var ee *exec.ExitError
		if !errors.As(p.err, &ee) {
			ts.Fatalf("expectbg: %v", p.err)
		}
		got = ee.ExitCode()
	}
	if got != want {
		ts.Fatalf("%s (%s) exited %d, want %d; stderr %q", args[1], p.cmd.Args[0], got, want, p.stderr.String())
	}
	if err := checkStderr(p.cmd.Args, got, p.stderr.String()); err != nil {
		ts.Fatalf("%s: %v", args[1], err)
	}
}

// cmdWaitFile: waitfile FILE... waits (within HangGuard) until each FILE
// exists: how a script learns that a background command got somewhere.
func cmdWaitFile(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) == 0 {
		ts.Fatalf("usage: waitfile FILE...")
	}
	deadline := time.Now().Add(HangGuard)
	for _, f := range args {
		for {
			if _, err := os.Stat(ts.MkAbs(f)); err == nil {
				break
			}
			if time.Now().After(deadline) {
				ts.Fatalf("%s did not appear within %v", f, HangGuard)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

func bgLookup(ts *testscript.TestScript, name string) *bgProc {
	bgMu.Lock()
	p := bgRuns[ts][name]
	bgMu.Unlock()
	if p == nil {
		ts.Fatalf("no background process %q (see start)", name)
	}
	return p
}

// killAll kills what is left of the script's background processes.
func killAll(ts *testscript.TestScript) {
	bgMu.Lock()
	procs := bgRuns[ts]
	delete(bgRuns, ts)
	bgMu.Unlock()
	for _, p := range procs {
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// environ is the script's environment as exec passes it (testscript does
// not expose it otherwise): what `env -0` prints, written to a file so that
// it stays out of the script's log.
func environ(ts *testscript.TestScript) []string {
	f, err := os.CreateTemp(ts.Getenv("WORK"), ".env-*")
	if err != nil {
		ts.Fatalf("start: %v", err)
	}
	f.Close()
	defer os.Remove(f.Name())
	if err := ts.Exec("sh", "-c", `exec env -0 > "$0"`, f.Name()); err != nil {
		ts.Fatalf("start: env: %v", err)
	}
	b, err := os.ReadFile(f.Name())
	if err != nil {
		ts.Fatalf("start: %v", err)
	}
	return strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00")
}

// lookPath finds prog in the script's PATH.
func lookPath(ts *testscript.TestScript, prog string) (string, error) {
	if strings.Contains(prog, "/") {
		return ts.MkAbs(prog), nil
	}
	for _, dir := range filepath.SplitList(ts.Getenv("PATH")) {
		p := filepath.Join(dir, prog)
		if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", &exec.Error{Name: prog, Err: exec.ErrNotFound}
}

// signalNum reads a signal name (TERM, SIGTERM) or number.
func signalNum(s string) syscall.Signal {
	if n, err := strconv.Atoi(s); err == nil && n > 0 && n < 65 {
		return syscall.Signal(n)
	}
	u := strings.ToUpper(s)
	if !strings.HasPrefix(u, "SIG") {
		u = "SIG" + u
	}
	return unix.SignalNum(u)
}
