//go:build linux

package supervise_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/fence-dev/fence/internal/exitcode"
	"github.com/fence-dev/fence/internal/supervise"
	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/coord/local"
)

// TestTokenReachesCommand: the command sees its lease in FENCE_*, replacing
// inherited values; credentials are not passed on; tokens grow across runs.
func TestTokenReachesCommand(t *testing.T) {
	for _, bk := range backends {
		t.Run(bk.name, func(t *testing.T) {
			b := bk.open(t)
			out := tempPath(t, "env")
			env := append(os.Environ(), "FENCE_TOKEN=999999", "FENCE_LOCK=other", "FENCE_PASSWORD=secret",
				"FENCE_PASSWORD_FILE=/etc/secret", "FENCE_STATE_DIR=/elsewhere", "FENCE_ENDPOINTS=http://elsewhere:2379",
				"FENCE_DEADLINE=stale", "FENCE_SLOT=7", "KEEP=kept")
			script := `for v in FENCE_LOCK FENCE_TOKEN FENCE_LEASE_ID FENCE_HOLDER FENCE_TTL FENCE_DEADLINE FENCE_SLOT FENCE_PASSWORD FENCE_PASSWORD_FILE FENCE_STATE_DIR FENCE_ENDPOINTS FENCE_PREFIX KEEP; do
  eval "printf '%s=%s\n' $v \"\${$v-<unset>}\""; done > ` + shell(out)
			var tokens []string
			for i := range 3 {
				code, err := run(t, b, supervise.Options{Lock: "jobs/env", Command: []string{script}, Shell: true,
					TTL: 2 * time.Second, Env: env, Holder: "tester"})
				if code != 0 || err != nil {
					t.Fatalf("run %d: code %d, %v", i, code, err)
				}
				got := map[string]string{}
				for _, l := range strings.Split(strings.TrimSpace(readFile(t, out)), "\n") {
					k, v, _ := strings.Cut(l, "=")
					got[k] = v
				}
				want := map[string]string{"FENCE_LOCK": "jobs/env", "FENCE_HOLDER": "tester", "FENCE_TTL": "2", "FENCE_SLOT": "0",
					"FENCE_DEADLINE": "<unset>", "FENCE_PASSWORD": "<unset>", "FENCE_PASSWORD_FILE": "<unset>", "KEEP": "kept"}
				for k, v := range b.location() {
					want[k] = v
				}
				if b.stateDir != "" {
					want["FENCE_ENDPOINTS"], want["FENCE_PREFIX"] = "<unset>", "<unset>"
				} else {
					want["FENCE_STATE_DIR"] = "<unset>"
				}
				for k, v := range want {
					if got[k] != v {
						t.Errorf("run %d: %s=%q, want %q", i, k, got[k], v)
					}
				}
				if got["FENCE_TOKEN"] == "999999" || got["FENCE_TOKEN"] == "" || got["FENCE_LEASE_ID"] == "" {
					t.Fatalf("run %d: token %q, lease id %q", i, got["FENCE_TOKEN"], got["FENCE_LEASE_ID"])
				}
				tokens = append(tokens, got["FENCE_TOKEN"])
			}
			for i := 1; i < len(tokens); i++ {
				var a, c uint64
				fmt.Sscan(tokens[i-1], &a)
				fmt.Sscan(tokens[i], &c)
				if c <= a {
					t.Fatalf("tokens do not grow: %v", tokens)
				}
			}
			if info, err := b.c.Inspect(context.Background(), "jobs/env"); err != nil || info.Held {
				t.Fatalf("lock after the runs: %+v, %v", info, err)
			}
		})
	}
}

// TestStdioAndDeadlineEnv: output that is not a file goes through pipes;
// FENCE_DEADLINE is an RFC 3339 time about --deadline ahead.
func TestStdioAndDeadlineEnv(t *testing.T) {
	b := localBackend(t)
	var stdout, stderr bytes.Buffer
	code, err := run(t, b, supervise.Options{Lock: "stdio", TTL: 2 * time.Second, Deadline: time.Hour,
		Command: []string{"sh", "-c", `read line; echo "out:$line:$FENCE_DEADLINE"; echo err >&2`},
		Stdin:   strings.NewReader("hello\n"), Stdout: &stdout, Stderr: &stderr})
	if code != 0 || err != nil {
		t.Fatalf("code %d, %v", code, err)
	}
	if stderr.String() != "err\n" {
		t.Fatalf("stderr %q (fence must stay quiet)", stderr.String())
	}
	parts := strings.SplitN(strings.TrimSpace(stdout.String()), ":", 3)
	if len(parts) != 3 || parts[1] != "hello" {
		t.Fatalf("stdout %q", stdout.String())
	}
	dl, err := time.Parse(time.RFC3339, parts[2])
	if err != nil {
		t.Fatalf("FENCE_DEADLINE %q: %v", parts[2], err)
	}
	if d := time.Until(dl); d < 58*time.Minute || d > time.Hour {
		t.Fatalf("FENCE_DEADLINE %v ahead, want about an hour", d)
	}
}

// TestExitCodes: every exit code of the contract that run produces in
// process (the fault cases have tests of their own).
func TestExitCodes(t *testing.T) {
	b := localBackend(t)
	dir := t.TempDir()
	noexec := filepath.Join(dir, "noexec")
	if err := os.WriteFile(noexec, []byte("#!/bin/sh\necho hi\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	garbage := filepath.Join(dir, "garbage")
	if err := os.WriteFile(garbage, []byte{0x7f, 'E', 'L', 'F', 0, 0}, 0o755); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name    string
		o       supervise.Options
		code    int
		errText string // "" when fence must say nothing
	}{
		{"success", supervise.Options{Command: []string{"true"}}, 0, ""},
		{"pass-through", supervise.Options{Command: []string{"sh", "-c", "exit 3"}}, 3, ""},
		{"shell pass-through", supervise.Options{Command: []string{"exit 7"}, Shell: true}, 7, ""},
		{"own signal", supervise.Options{Command: []string{"sh", "-c", "kill -USR1 $$"}}, 128 + 10, ""},
		{"not found", supervise.Options{Command: []string{"fence-no-such-command"}}, 127, "command not found"},
		{"not found by path", supervise.Options{Command: []string{filepath.Join(dir, "missing")}}, 127, "command not found"},
		{"shell not found", supervise.Options{Command: []string{"fence-no-such-command"}, Shell: true}, 127, ""},
		{"not executable", supervise.Options{Command: []string{noexec}}, 126, "permission denied"},
		{"directory", supervise.Options{Command: []string{dir}}, 126, "permission denied"},
		{"exec format error", supervise.Options{Command: []string{garbage}}, 126, "exec format error"},
		{"deadline", supervise.Options{Command: []string{"sleep", "30"}, Deadline: 200 * time.Millisecond}, 124, "deadline 200ms reached"},
		{"grace too long", supervise.Options{Command: []string{"true"}, Grace: 900 * time.Millisecond}, 125, "no room for two renewal attempts"},
		{"no-renew deadline too long", supervise.Options{Command: []string{"true"}, NoRenew: true, Deadline: 5 * time.Second}, 125, "exceeds what a --no-renew lease"},
		{"shell with args", supervise.Options{Command: []string{"echo", "x"}, Shell: true}, 125, "one string"},
		{"bad name", supervise.Options{Lock: "a\nb", Command: []string{"true"}}, 125, "control character"},
		{"bad signal", supervise.Options{Command: []string{"true"}, Signal: syscall.SIGSTOP}, 125, "does not end a process"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := tc.o
			if o.Lock == "" {
				o.Lock = "codes"
			}
			o.TTL = 2 * time.Second
			o.Stderr = &bytes.Buffer{} // sh's "not found"
			before, _ := b.c.Inspect(context.Background(), "codes")
			code, err := run(t, b, o)
			if code != tc.code {
				t.Fatalf("code %d (%v), want %d", code, err, tc.code)
			}
			switch {
			case tc.errText == "" && err != nil:
				t.Fatalf("unexpected message %q", err)
			case tc.errText != "" && (err == nil || !strings.Contains(err.Error(), tc.errText)):
				t.Fatalf("message %v, want it to say %q", err, tc.errText)
			case err != nil && strings.Contains(err.Error(), "\n"):
				t.Fatalf("message spans lines: %q", err)
			}
			if code == 125 && !errors.Is(err, coord.ErrInvalid) {
				t.Fatalf("125 error %v does not wrap ErrInvalid", err)
			}
			after, _ := b.c.Inspect(context.Background(), "codes")
			if after.Held {
				t.Fatal("the lock is still held")
			}
			if (code == 125 || (code == 127 && !o.Shell) || (code == 126 && o.Command[0] != garbage)) && after.LastToken != before.LastToken {
				t.Fatalf("a command refused before the start took a lease (token %d -> %d)", before.LastToken, after.LastToken)
			}
		})
	}
}

// TestBusy: no-wait and a bounded wait on a held lock exit with the conflict
// code (default 75, or the one asked for, including 0).
func TestBusy(t *testing.T) {
	for _, bk := range backends {
		t.Run(bk.name, func(t *testing.T) {
			b := bk.open(t)
			ctx := context.Background()
			l, err := b.c.Acquire(ctx, "busy", coord.AcquireOptions{TTL: 30 * time.Second, Holder: "someone"})
			if err != nil {
				t.Fatal(err)
			}
			defer b.c.Release(ctx, l.Name, l.ID)
			ran := tempPath(t, "ran")
			cmd := []string{"touch", ran}
			for _, tc := range []struct {
				wait     time.Duration
				conflict int
			}{{0, exitcode.Busy}, {300 * time.Millisecond, 3}, {0, 0}} {
				code, err := run(t, b, supervise.Options{Lock: "busy", Command: cmd, TTL: 2 * time.Second, Wait: tc.wait, ConflictExitCode: tc.conflict})
				if code != tc.conflict || !errors.Is(err, coord.ErrBusy) {
					t.Fatalf("wait %v: code %d, %v; want %d and ErrBusy", tc.wait, code, err, tc.conflict)
				}
			}
			if _, err := os.Stat(ran); err == nil {
				t.Fatal("the command ran without the lock")
			}
		})
	}
}

// TestWaitsThenRuns: with --wait, fence waits for the holder, says so on a
// terminal (here: Verbose), and runs once the lock is released.
func TestWaitsThenRuns(t *testing.T) {
	b := localBackend(t)
	ctx := context.Background()
	l, err := b.c.Acquire(ctx, "wait", coord.AcquireOptions{TTL: 30 * time.Second, Holder: "first"})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		time.Sleep(300 * time.Millisecond)
		b.c.Release(ctx, l.Name, l.ID)
	}()
	var stderr bytes.Buffer
	code, err := run(t, b, supervise.Options{Lock: "wait", Command: []string{"true"}, TTL: 2 * time.Second,
		Wait: coord.WaitForever, Stderr: &stderr, Verbose: true})
	if code != 0 || err != nil {
		t.Fatalf("code %d, %v", code, err)
	}
	if want := fmt.Sprintf("waiting for %q, held by first (token %d)", "wait", l.Token); !strings.Contains(stderr.String(), want) {
		t.Fatalf("stderr %q lacks %q", stderr.String(), want)
	}
}

// TestNoRenew: a fixed lease is not renewed; the deadline defaults to what
// the lease covers (TTL - margin - grace), and the stop exits 124.
func TestNoRenew(t *testing.T) {
	for _, bk := range backends {
		t.Run(bk.name, func(t *testing.T) {
			b := bk.open(t)
			out := tempPath(t, "deadline")
			start := time.Now()
			code, err := run(t, b, supervise.Options{Lock: "fixed", TTL: 2 * time.Second, NoRenew: true,
				Command: []string{"echo $FENCE_DEADLINE > " + shell(out) + "; exec sleep 30"}, Shell: true})
			took := time.Since(start)
			if code != exitcode.Deadline || err == nil || !strings.Contains(err.Error(), "no-renew") {
				t.Fatalf("code %d, %v; want 124", code, err)
			}
			// TTL 2s, margin 200ms, grace 400ms: the stop signal comes 1.4s
			// after the grant; sleep dies of it at once.
			if took < 1300*time.Millisecond || took > 10*time.Second {
				t.Fatalf("stopped after %v, want about 1.4s", took)
			}
			if _, err := time.Parse(time.RFC3339, strings.TrimSpace(readFile(t, out))); err != nil {
				t.Fatalf("FENCE_DEADLINE: %v", err)
			}
		})
	}
}

// TestRevokeStopsCommand: `fence revoke` (Coordinator.Revoke) ends the
// lease; the next renewal (local) or the watch of the lease's key (etcd, see
// leasewatch_test.go) sees it, the command is stopped, fence exits 76.
func TestRevokeStopsCommand(t *testing.T) {
	for _, bk := range backends {
		t.Run(bk.name, func(t *testing.T) {
			b := bk.open(t)
			pidFile := tempPath(t, "pid")
			type result struct {
				code int
				err  error
			}
			res := make(chan result, 1)
			go func() {
				code, err := run(t, b, supervise.Options{Lock: "revoked", TTL: 3 * time.Second,
					Command: []string{"echo $$ > " + shell(pidFile) + "; exec sleep 30"}, Shell: true})
				res <- result{code, err}
			}()
			pid := pids(t, waitFile(t, pidFile, 1))[0]
			death := watchDeath(t, pid)
			if _, err := b.c.Revoke(context.Background(), "revoked"); err != nil {
				t.Fatal(err)
			}
			revoked := time.Now()
			death.wait(t)
			t.Logf("command dead %v after the revoke (renew interval 1s)", time.Since(revoked).Round(time.Millisecond))
			r := <-res
			t.Logf("fence says: %v", r.err)
			if r.code != exitcode.LeaseLost || r.err == nil || !strings.Contains(r.err.Error(), "was lost on the coordinator") {
				t.Fatalf("code %d, %v; want 76", r.code, r.err)
			}
		})
	}
}

// TestMetricsFile: the textfile is written atomically at exit, parsed by
// the Prometheus text parser, readable by an exporter running as another
// user; a failed run keeps the last success time.
func TestMetricsFile(t *testing.T) {
	b := localBackend(t)
	path := filepath.Join(t.TempDir(), "fence_nightly.prom")
	code, err := run(t, b, supervise.Options{Lock: "nightly", TTL: time.Second, MetricsFile: path,
		Command: []string{"sleep", "0.6"}})
	if code != 0 || err != nil {
		t.Fatalf("code %d, %v", code, err)
	}
	m := parseMetrics(t, path)
	st, _ := os.Stat(path)
	if st.Mode().Perm() != 0o644 {
		t.Fatalf("mode %v, want 0644", st.Mode())
	}
	want := map[string]func(float64) bool{
		"fence_run_exit_code":                      func(v float64) bool { return v == 0 },
		"fence_run_duration_seconds":               func(v float64) bool { return v >= 0.6 && v < 10 },
		"fence_lease_acquire_wait_seconds":         func(v float64) bool { return v >= 0 && v < 10 },
		"fence_lease_renewals_total":               func(v float64) bool { return v >= 1 },
		"fence_lease_renewal_failures_total":       func(v float64) bool { return v == 0 },
		"fence_lease_lost":                         func(v float64) bool { return v == 0 },
		"fence_run_deadline_exceeded":              func(v float64) bool { return v == 0 },
		"fence_lease_token":                        func(v float64) bool { return v == 1 },
		"fence_run_last_success_timestamp_seconds": func(v float64) bool { return v > float64(time.Now().Add(-time.Minute).Unix()) },
	}
	for name, ok := range want {
		v, found := m[name]
		if !found || !ok(v) {
			t.Errorf("%s = %v (found %v)", name, v, found)
		}
	}
	last := m["fence_run_last_success_timestamp_seconds"]

	code, _ = run(t, b, supervise.Options{Lock: "nightly", TTL: time.Second, MetricsFile: path,
		Command: []string{"sleep", "5"}, Deadline: 100 * time.Millisecond})
	if code != exitcode.Deadline {
		t.Fatalf("code %d", code)
	}
	m = parseMetrics(t, path)
	if m["fence_run_exit_code"] != 124 || m["fence_run_deadline_exceeded"] != 1 || m["fence_lease_token"] != 2 ||
		m["fence_run_last_success_timestamp_seconds"] != last {
		t.Fatalf("after a deadline: %v (last success was %v)", m, last)
	}
	if ents, _ := os.ReadDir(filepath.Dir(path)); len(ents) != 1 {
		t.Fatalf("temporary files left: %v", ents)
	}
}

// TestWatchdogFrozen: with the watchdog stopped (SIGSTOP), fence alone
// stops the command at its deadline: either process enforces it.
func TestWatchdogFrozen(t *testing.T) {
	frozenWatchdog(t, "frozen-watchdog", func(watchdog int) {
		if err := syscall.Kill(watchdog, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
	}, func(watchdog int, res <-chan runResult) {
		select {
		case r := <-res:
			t.Fatalf("fence returned before the watchdog resumed: %d, %v", r.code, r.err)
		default:
		}
	})
}

// TestWatchdogFrozenBeforeReport freezes the watchdog after it started the
// command and before it told fence the command's process group: fence alone
// must still stop the command at the deadline.
func TestWatchdogFrozenBeforeReport(t *testing.T) {
	t.Setenv("FENCE_TEST_WATCHDOG_FREEZE_BEFORE_REPORT", "1")
	frozenWatchdog(t, "frozen-before-report", func(int) {}, func(watchdog int, _ <-chan runResult) {
		if wst, err := procStat(watchdog); err != nil || !wst.Stopped() {
			t.Fatalf("the watchdog was not frozen while the command died: %+v, %v", wst, err)
		}
	})
}

type runResult struct {
	code int
	err  error
}

// frozenWatchdog runs a command that traps TERM under a 1s deadline, calls
// freeze with the watchdog's PID once the command runs, waits for the
// command to die (only fence's own SIGKILL after the grace ends it), calls
// check, resumes the watchdog and expects exit 124.
func frozenWatchdog(t *testing.T, lock string, freeze func(watchdog int), check func(watchdog int, res <-chan runResult)) {
	b := localBackend(t)
	pidFile := tempPath(t, "pid")
	res := make(chan runResult, 1)
	go func() {
		code, err := run(t, b, supervise.Options{Lock: lock, TTL: 3 * time.Second, Deadline: time.Second,
			Grace: 300 * time.Millisecond, Command: []string{"trap '' TERM; echo $$ > " + shell(pidFile) + "; while :; do sleep 0.05; done"}, Shell: true})
		res <- runResult{code, err}
	}()
	pid := pids(t, waitFile(t, pidFile, 1))[0]
	death := watchDeath(t, pid)
	st, err := procStat(pid)
	if err != nil {
		t.Fatal(err)
	}
	watchdog := st.PPID
	freeze(watchdog)
	defer syscall.Kill(watchdog, syscall.SIGCONT)
	death.wait(t)
	check(watchdog, res)
	if err := syscall.Kill(watchdog, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	r := <-res
	if r.code != exitcode.Deadline {
		t.Fatalf("code %d, %v; want 124", r.code, r.err)
	}
}

func TestParseSignal(t *testing.T) {
	for in, want := range map[string]syscall.Signal{"TERM": syscall.SIGTERM, "sigint": syscall.SIGINT, "9": syscall.SIGKILL, " HUP ": syscall.SIGHUP, "USR1": syscall.SIGUSR1} {
		if got, err := supervise.ParseSignal(in); err != nil || got != want {
			t.Errorf("ParseSignal(%q) = %v, %v", in, got, err)
		}
	}
	for _, in := range []string{"", "NOPE", "0", "65", "-1", "SIG"} {
		if _, err := supervise.ParseSignal(in); !errors.Is(err, coord.ErrInvalid) {
			t.Errorf("ParseSignal(%q) = %v, want ErrInvalid", in, err)
		}
	}
	if n := supervise.SignalName(syscall.SIGTERM); n != "TERM" {
		t.Errorf("SignalName(TERM) = %q", n)
	}
}

// TestNoGoroutineLeak: Run leaves nothing running in the calling process,
// whether the command ran, was stopped or never started.
func TestNoGoroutineLeak(t *testing.T) {
	b := localBackend(t)
	run(t, b, supervise.Options{Lock: "warm", TTL: time.Second, Command: []string{"true"}}) // starts os/signal's loop
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	for _, o := range []supervise.Options{
		{Command: []string{"true"}},
		{Command: []string{"sleep", "5"}, Deadline: 100 * time.Millisecond},
		{Command: []string{"fence-no-such-command"}},
		{Command: []string{"true"}, Stdout: &bytes.Buffer{}, Stderr: &bytes.Buffer{}},
	} {
		o.Lock, o.TTL = "leak", time.Second
		run(t, b, o)
	}
}

// TestContextEnds: when Run's context ends, the command is stopped, the
// lease released, and fence fails (125).
func TestContextEnds(t *testing.T) {
	b := localBackend(t)
	pidFile := tempPath(t, "pid")
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	code, err := supervise.Run(ctx, b.c, supervise.Options{Lock: "ctx", TTL: 3 * time.Second, Location: b.location(),
		Command: []string{"echo $$ > " + shell(pidFile) + "; exec sleep 30"}, Shell: true})
	if code != exitcode.Failure || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("code %d, %v", code, err)
	}
	assertAllDead(t, pids(t, waitFile(t, pidFile, 1)))
	if info, _ := b.c.Inspect(context.Background(), "ctx"); info.Held {
		t.Fatal("the lock is still held")
	}
}

// BenchmarkRunTrue is the cost of `fence run L -- true` on the local
// backend, less fence's own process start: the watchdog's start, acquire,
// the command, release.
func BenchmarkRunTrue(b *testing.B) {
	dir := b.TempDir()
	c, err := local.Open(dir)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	for b.Loop() {
		if code, err := supervise.Run(ctx, c, supervise.Options{Lock: "bench", TTL: 15 * time.Second, Command: []string{"true"}}); code != 0 {
			b.Fatal(code, err)
		}
	}
}
