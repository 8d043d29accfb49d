package coordtest

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fence-dev/fence/internal/syncbuf"
	"github.com/fence-dev/fence/pkg/clock"
	"github.com/fence-dev/fence/pkg/coord"
)

// helperEnv carries a helper's arguments, JSON-encoded; its presence puts a
// test binary in helper mode.
const helperEnv = "FENCE_COORDTEST_HELPER"

// IsHelper reports whether this process was started by HelperCommand. A test
// binary's TestMain calls HelperMain, and nothing else, when it is.
func IsHelper() bool { return os.Getenv(helperEnv) != "" }

// HelperCommand returns an unstarted command that runs the current test
// binary as a helper with args. The caller adds to its Env what HelperMain's
// open function needs to reach the coordinator under test.
func HelperCommand(args ...string) *exec.Cmd {
	b, err := json.Marshal(args)
	if err != nil {
		panic(err) // []string always marshals
	}
	exe, err := os.Executable()
	if err != nil {
		exe = os.Args[0]
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+string(b))
	return cmd
}

// HelperMain runs the helper that HelperCommand asked for on a client made by
// open, and returns the process's exit code. The helper exits when its stdin
// closes, so that no helper outlives the test that started it.
func HelperMain(open func() (coord.Coordinator, error)) int {
	var args []string
	if err := json.Unmarshal([]byte(os.Getenv(helperEnv)), &args); err != nil || len(args) == 0 {
		fmt.Fprintf(os.Stderr, "coordtest helper: bad %s: %q\n", helperEnv, os.Getenv(helperEnv))
		return 2
	}
	go func() {
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			if sc.Text() == "go" {
				close(goSignal)
			}
		}
		os.Exit(0)
	}()
	c, err := open()
	if err != nil {
		fmt.Fprintf(os.Stderr, "coordtest helper: open: %v\n", err)
		return 2
	}
	defer c.Close()
	if err := runHelper(context.Background(), c, args); err != nil {
		fmt.Fprintf(os.Stderr, "coordtest helper %v: %v\n", args, err)
		return 1
	}
	return 0
}

// helperMsg is one line a helper writes on stdout.
type helperMsg struct {
	Event  string     `json:"event"` // ready, queued, acquired
	PID    int        `json:"pid"`
	Token  uint64     `json:"token,omitempty"`
	ID     string     `json:"id,omitempty"`
	Holder string     `json:"holder,omitempty"`
	TTL    int64      `json:"ttl,omitempty"` // granted, ns
	Sent   clock.Boot `json:"sent,omitempty"`
}

var stdoutMu sync.Mutex

// goSignal is closed when the helper reads "go" on stdin.
var goSignal = make(chan struct{})

func say(m helperMsg) {
	m.PID = os.Getpid()
	b, _ := json.Marshal(m)
	stdoutMu.Lock()
	defer stdoutMu.Unlock()
	os.Stdout.Write(append(b, '\n'))
}

// runHelper runs one helper:
//
//	contend NAME ROUNDS DIR   report "ready", wait for "go" on stdin, then
//	                          acquire NAME ROUNDS times through the section in DIR
//	churn NAME TTL DIR        acquire and release NAME until killed, logging
//	                          every token to DIR/tokens
//	hold NAME TTL [process]   acquire (attached to this process), report, block
//	wait NAME TTL             as hold, reporting "queued" from OnWait
//	sleep                     report "ready" and block
func runHelper(cx context.Context, c coord.Coordinator, args []string) error {
	holder := fmt.Sprintf("helper-%s-%d", args[0], os.Getpid())
	switch {
	case args[0] == "contend" && len(args) == 4:
		rounds, err := strconv.Atoi(args[2])
		if err != nil {
			return err
		}
		say(helperMsg{Event: "ready"})
		<-goSignal
		return contend(cx, c, args[1], rounds, &section{dir: args[3]}, holder)
	case args[0] == "churn" && len(args) == 4:
		ttl, err := time.ParseDuration(args[2])
		if err != nil {
			return err
		}
		say(helperMsg{Event: "ready"})
		for {
			l, err := c.Acquire(cx, args[1], coord.AcquireOptions{TTL: ttl, Holder: holder, Wait: coord.WaitForever})
			if err != nil {
				return err
			}
			if err := appendLine(filepath.Join(args[3], "tokens"), l.Token); err != nil {
				return err
			}
			if err := c.Release(cx, args[1], l.ID); err != nil {
				return err
			}
		}
	case (args[0] == "hold" || args[0] == "wait") && len(args) >= 3:
		ttl, err := time.ParseDuration(args[2])
		if err != nil {
			return err
		}
		opts := coord.AcquireOptions{TTL: ttl, Holder: holder, Wait: coord.WaitForever}
		if len(args) > 3 && args[3] == "process" {
			opts.Process = &coord.ProcessInfo{PIDs: []int{os.Getpid()}}
		}
		if args[0] == "wait" {
			opts.OnWait = func(coord.LockInfo) { say(helperMsg{Event: "queued", Holder: holder}) }
		}
		l, err := c.Acquire(cx, args[1], opts)
		if err != nil {
			return err
		}
		say(helperMsg{Event: "acquired", Token: l.Token, ID: l.ID, Holder: l.Holder, TTL: int64(l.TTL), Sent: clock.Now().Add(-time.Since(l.Sent))})
		block() // until stdin closes or a signal
	case args[0] == "sleep":
		say(helperMsg{Event: "ready"})
		block()
	}
	return fmt.Errorf("unknown helper arguments %q", args)
}

// block sleeps until the process ends (a sleeping goroutine, unlike select{},
// never trips the runtime's deadlock detector).
func block() {
	for {
		time.Sleep(time.Hour)
	}
}

// proc is a helper process started by the suite.
type proc struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	msgs   chan helperMsg
	done   chan struct{} // closed when reaped
	err    error         // Wait's error, valid after done
	stderr *syncbuf.Buffer
}

// spawn starts a helper and registers its end with t: stdin closed, then
// SIGKILL if it has not exited, then reaped. A helper that wrote to stderr
// has it logged.
func (s *suite) spawn(t testing.TB, setup func(*exec.Cmd), args ...string) *proc {
	t.Helper()
	cmd := s.h.Spawn(t, args...)
	if setup != nil {
		setup(cmd)
	}
	p := &proc{cmd: cmd, msgs: make(chan helperMsg, 16), done: make(chan struct{}), stderr: &syncbuf.Buffer{}}
	cmd.Stderr = p.stderr
	var err error
	if p.stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting helper %v: %v", args, err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			var m helperMsg
			if json.Unmarshal(sc.Bytes(), &m) == nil {
				p.msgs <- m
			}
		}
		close(p.msgs)
		p.err = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.stdin.Close()
		select {
		case <-p.done:
		case <-time.After(5 * time.Second):
			p.kill(t)
		}
		if e := p.stderr.String(); e != "" {
			t.Logf("helper %v (pid %d) stderr:\n%s", args, cmd.Process.Pid, e)
		}
	})
	return p
}

// next waits for the helper's next message, which must be event.
func (p *proc) next(t testing.TB, event string) helperMsg {
	t.Helper()
	select {
	case m, ok := <-p.msgs:
		if !ok {
			<-p.done
			t.Fatalf("helper %d exited (%v) before %q; stderr: %s", p.cmd.Process.Pid, p.err, event, p.stderr.String())
		}
		if m.Event != event {
			t.Fatalf("helper %d said %q, want %q", p.cmd.Process.Pid, m.Event, event)
		}
		return m
	case <-time.After(guard):
		t.Fatalf("helper %d: no %q within %v", p.cmd.Process.Pid, event, guard)
	}
	return helperMsg{}
}

// kill sends SIGKILL and waits until the process is reaped.
func (p *proc) kill(t testing.TB) {
	t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	select {
	case <-p.done:
	case <-time.After(guard):
		t.Fatalf("helper %d not reaped %v after SIGKILL", p.cmd.Process.Pid, guard)
	}
}

// start tells a helper waiting for it to go on.
func (p *proc) start(t testing.TB) {
	t.Helper()
	if _, err := io.WriteString(p.stdin, "go\n"); err != nil {
		t.Fatalf("helper %d: %v", p.cmd.Process.Pid, err)
	}
}

// finish waits for the helper to exit, which must be a success.
func (p *proc) finish(t testing.TB) {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(guard):
		t.Fatalf("helper %d still running after %v", p.cmd.Process.Pid, guard)
	}
	if p.err != nil {
		t.Errorf("helper %d: %v; stderr: %s", p.cmd.Process.Pid, p.err, p.stderr.String())
	}
}
