package scripttest

import (
	"bufio"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// HangGuard bounds every wait of these tests; it is far above what any step
// needs, so it only turns a hang into a failure.
const HangGuard = 30 * time.Second

// Lines starts cmd and sends each line of its stdout on the returned
// channel, closed at EOF. The process is killed at cleanup if still running.
func Lines(t *testing.T, cmd *exec.Cmd) <-chan string {
	t.Helper()
	r, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	ch := make(chan string, 100)
	go func() {
		defer close(ch)
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			ch <- sc.Text()
		}
		io.Copy(io.Discard, r)
	}()
	return ch
}

// ExitCode waits for cmd (within HangGuard) and returns its exit code.
func ExitCode(t *testing.T, cmd *exec.Cmd) int {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return 0
	case <-time.After(HangGuard):
		cmd.Process.Kill()
		t.Fatalf("fence %v did not exit", cmd.Args[1:])
		return -1
	}
}

// Listed is the part of `fence list -o json` the tests look at.
type Listed []struct {
	Name  string  `json:"name"`
	Held  bool    `json:"held"`
	Token *uint64 `json:"token"`
	Limit *struct {
		Frozen bool `json:"frozen"`
	} `json:"limit"`
}

// Frozen reports whether the list shows lock name frozen.
func (l Listed) Frozen(name string) bool {
	for _, i := range l {
		if i.Name == name {
			return i.Limit != nil && i.Limit.Frozen
		}
	}
	return false
}

// Has reports whether the list shows lock name held (or free, or absent).
func (l Listed) Has(name string, held bool) bool {
	for _, i := range l {
		if i.Name == name {
			return i.Held == held
		}
	}
	return !held
}

// NextList reads JSON lines from ch until one satisfies ok.
func NextList(t *testing.T, ch <-chan string, what string, ok func(Listed) bool) {
	t.Helper()
	timeout := time.After(HangGuard)
	for {
		select {
		case line, open := <-ch:
			if !open {
				t.Fatalf("watch ended while waiting for %s", what)
			}
			var l Listed
			if err := json.Unmarshal([]byte(line), &l); err != nil {
				t.Fatalf("watch printed %q: %v", line, err)
			}
			if ok(l) {
				return
			}
		case <-timeout:
			t.Fatalf("no list with %s", what)
		}
	}
}

// LeaseID extracts FENCE_LEASE_ID from `fence acquire -o env` output.
func LeaseID(envOutput string) string {
	for _, l := range strings.Split(envOutput, "\n") {
		if v, ok := strings.CutPrefix(l, "FENCE_LEASE_ID="); ok {
			return strings.Trim(v, "'")
		}
	}
	return ""
}

// ListWatch checks that `fence list --watch` prints the list when it starts
// and again after every change, not on a timer, and that SIGINT ends it with
// exit 0.
func ListWatch(t *testing.T, env []string) {
	cmd := exec.Command("fence", "list", "--watch", "-o", "json")
	cmd.Env = env
	var stderr strings.Builder
	cmd.Stderr = &stderr
	ch := Lines(t, cmd)

	NextList(t, ch, "no locks", func(l Listed) bool { return len(l) == 0 })
	lease := Output(t, env, "acquire", "w", "--ttl", "1m", "-o", "env")
	NextList(t, ch, "w held", func(l Listed) bool { return l.Has("w", true) })
	Output(t, env, "release", "w", "--lease", LeaseID(lease))
	NextList(t, ch, "w free", func(l Listed) bool { return l.Has("w", false) })
	Output(t, env, "acquire", "v", "--ttl", "1m")
	NextList(t, ch, "v held", func(l Listed) bool { return l.Has("v", true) })
	// A freeze and a thaw show at once (the watch reports limits), not
	// at the next change of a lock.
	Output(t, env, "freeze", "--under", "v")
	NextList(t, ch, "v frozen", func(l Listed) bool { return l.Frozen("v") })
	Output(t, env, "thaw", "--under", "v")
	NextList(t, ch, "v thawed", func(l Listed) bool { return l.Has("v", true) && !l.Frozen("v") })

	// Nothing changes: nothing is printed (a timer would redraw).
	select {
	case line, ok := <-ch:
		if ok {
			t.Fatalf("printed %q with no change", line)
		}
		t.Fatal("watch ended")
	case <-time.After(2 * time.Second):
	}

	cmd.Process.Signal(os.Interrupt)
	if code := ExitCode(t, cmd); code != 0 {
		t.Fatalf("list --watch exited %d after SIGINT, stderr %q", code, stderr.String())
	}
	if stderr.Len() != 0 {
		t.Fatalf("stderr %q", stderr.String())
	}
}
