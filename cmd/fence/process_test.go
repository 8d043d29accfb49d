package main

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fence-dev/fence/internal/faultproxy"

	st "github.com/fence-dev/fence/cmd/fence/internal/scripttest"
)

// TestListWatchRedrawsOnEachChange on the local coordinator (etcd: see
// internal/etcdit).
func TestListWatchRedrawsOnEachChange(t *testing.T) {
	st.ListWatch(t, st.Env(t.TempDir()))
}

// waitForWaiters polls status until the lock has n waiters.
func waitForWaiters(t *testing.T, env []string, lock string, n int) {
	t.Helper()
	deadline := time.Now().Add(st.HangGuard)
	for time.Now().Before(deadline) {
		cmd := exec.Command("fence", "status", lock, "-o", "json")
		cmd.Env = env
		out, _ := cmd.Output()
		var v struct{ Waiters int }
		if json.Unmarshal(out, &v) == nil && v.Waiters == n {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s never had %d waiters", lock, n)
}

// TestAcquireWaitsThenGetsTheLock: a waiting acquire gets the lock when the
// holder releases it, with a larger token.
func TestAcquireWaitsThenGetsTheLock(t *testing.T) {
	env := st.Env(t.TempDir())
	first := st.Output(t, env, "acquire", "q", "--ttl", "1m", "-o", "env")
	waiter := exec.Command("fence", "acquire", "q", "--wait", "25s", "-o", "env")
	waiter.Env = env
	ch := st.Lines(t, waiter)
	waitForWaiters(t, env, "q", 1)
	st.Output(t, env, "release", "q", "--lease", st.LeaseID(first))
	var got []string
	for l := range ch {
		got = append(got, l)
	}
	if code := st.ExitCode(t, waiter); code != 0 || len(got) != 3 || got[1] != "FENCE_TOKEN=2" {
		t.Fatalf("waiter exited %d with %q, want 0 and token 2", code, got)
	}
}

// TestAcquireInterrupted: SIGINT and SIGTERM end a waiting acquire with
// 128+signal and one line, and it leaves the queue. With -o env, stdout
// holds "(exit 128+signal)" for eval.
func TestAcquireInterrupted(t *testing.T) {
	env := st.Env(t.TempDir())
	st.Output(t, env, "acquire", "busy", "--ttl", "1m")
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		for _, args := range [][]string{{"acquire", "busy"}, {"acquire", "busy", "-o", "env"}} {
			cmd := exec.Command("fence", args...)
			cmd.Env = env
			var stderr strings.Builder
			cmd.Stderr = &stderr
			ch := st.Lines(t, cmd)
			waitForWaiters(t, env, "busy", 1)
			cmd.Process.Signal(sig)
			if code := st.ExitCode(t, cmd); code != 128+int(sig) || !st.OneErrorLine.MatchString(stderr.String()) || !strings.Contains(stderr.String(), "interrupted") {
				t.Fatalf("%v %v: exit %d, stderr %q; want %d and one line", args, sig, code, stderr.String(), 128+int(sig))
			}
			var out []string
			for l := range ch {
				out = append(out, l)
			}
			want := []string{}
			if len(args) > 2 {
				want = []string{fmt.Sprintf("(exit %d)", 128+int(sig))}
			}
			if !slices.Equal(out, want) {
				t.Fatalf("%v %v: stdout %q, want %q", args, sig, out, want)
			}
			waitForWaiters(t, env, "busy", 0)
		}
	}
}

// TestUnreachableWithinDialTimeout: nothing listens on the endpoint; fence
// gives up with one line, exit 125, after about --dial-timeout and not much
// later.
func TestUnreachableWithinDialTimeout(t *testing.T) {
	for _, args := range [][]string{{"status", "x"}, {"acquire", "x"}, {"list", "--watch"}} {
		start := time.Now()
		code, stderr := st.Run(t, st.Env(t.TempDir()), append([]string{"--endpoints", "127.0.0.1:9", "--dial-timeout", "1s"}, args...)...)
		elapsed := time.Since(start)
		if code != 125 || !st.OneErrorLine.MatchString(stderr) {
			t.Errorf("%v: exit %d, stderr %q; want 125 and one line", args, code, stderr)
		}
		if elapsed > 15*time.Second { // hang guard; the dial timeout is 1s
			t.Errorf("%v: took %v with --dial-timeout 1s", args, elapsed)
		}
	}
}

// TestRefusedReportedAtOnce: every endpoint refuses the connection (nothing
// listens on loopback port 9): fence says "connection refused" with one
// line, exit 125, at once, not "did not answer within 5s" after the default
// dial timeout. Completion lists nothing, as quickly.
func TestRefusedReportedAtOnce(t *testing.T) {
	env := st.Env(t.TempDir())
	env = slices.DeleteFunc(env, func(kv string) bool { return strings.HasPrefix(kv, "FENCE_STATE_DIR=") })
	for _, args := range [][]string{{"status", "x"}, {"acquire", "x"}, {"list", "--watch"}, {"run", "x", "--", "true"}, {"guard", "get", "k"}} {
		start := time.Now()
		code, stderr := st.Run(t, env, append([]string{"--endpoints", "127.0.0.1:9"}, args...)...)
		elapsed := time.Since(start)
		t.Logf("%v: %v: %q", args, elapsed, stderr)
		if code != 125 || !st.OneErrorLine.MatchString(stderr) || !strings.HasSuffix(stderr, "coordinator unavailable: etcd 127.0.0.1:9: connection refused\n") {
			t.Errorf("%v: exit %d, stderr %q; want 125 and one line saying connection refused", args, code, stderr)
		}
		if elapsed > 2*time.Second { // generous: the dial timeout is 5s
			t.Errorf("%v: refused after %v", args, elapsed)
		}
	}
	start := time.Now()
	out, err := completion(env, "--endpoints", "127.0.0.1:9", "__complete", "status", "")
	if elapsed := time.Since(start); err != nil || elapsed > 2*time.Second {
		t.Errorf("completion on a refusing coordinator: %v after %v (%q)", err, elapsed, out)
	}
}

// TestCompletionBounded: shell completion does not wait for the dial
// timeout of a coordinator that takes the connection and never answers: it
// lists nothing after about a second (completionTimeout).
func TestCompletionBounded(t *testing.T) {
	env := st.Env(t.TempDir())
	env = slices.DeleteFunc(env, func(kv string) bool { return strings.HasPrefix(kv, "FENCE_STATE_DIR=") })
	silent := faultproxy.Silent(t)
	for _, args := range [][]string{{"__complete", "status", ""}, {"__complete", "run", ""}, {"__complete", "top", ""}} {
		start := time.Now()
		out, err := completion(env, append([]string{"--endpoints", silent}, args...)...)
		elapsed := time.Since(start)
		t.Logf("%v: %v: %q", args, elapsed, out)
		if err != nil || !strings.HasPrefix(out, ":") { // only the directive line: no candidates
			t.Errorf("%v: %v, stdout %q", args, err, out)
		}
		if elapsed > 3*time.Second { // the bound is 1s; the dial timeout 5s
			t.Errorf("%v: completion took %v", args, elapsed)
		}
	}
}

// completion runs fence's completion command and returns its stdout.
func completion(env []string, args ...string) (string, error) {
	cmd := exec.Command("fence", args...)
	cmd.Env = env
	out, err := cmd.Output()
	return string(out), err
}
