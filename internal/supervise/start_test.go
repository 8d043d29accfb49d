//go:build linux

package supervise_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fence-dev/fence/internal/exitcode"
	"github.com/fence-dev/fence/internal/supervise"
	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/coord/local"
)

// isWatchdog reports whether pid is a watchdog started by this process.
//
// exec.Cmd.Start returns once the child's execve has closed its close-on-exec
// descriptors, which the kernel does before it writes the new program's
// arguments: /proc/PID/cmdline may read empty for a moment after Start (CI
// saw it). An empty cmdline is therefore waited out, never taken as an answer.
func isWatchdog(t *testing.T, pid int) bool {
	t.Helper()
	for deadline := time.Now().Add(hang); ; time.Sleep(time.Millisecond) {
		st, err := procStat(pid)
		if err != nil || st.Gone() || st.PPID != os.Getpid() {
			return false
		}
		args, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if len(args) > 0 || time.Now().After(deadline) {
			return strings.Contains(string(args), "\x00"+supervise.WatchdogArg)
		}
	}
}

// TestStartThenClose: Start starts the watchdog process at once, before any
// coordinator exists; Close without Run ends it (no process is left behind),
// and a Run after Close is refused without touching the lock.
func TestStartThenClose(t *testing.T) {
	b := localBackend(t)
	r, err := supervise.Start(supervise.Options{Lock: "early", TTL: 3 * time.Second, Command: []string{"true"}, Location: b.location()})
	if err != nil {
		t.Fatal(err)
	}
	wd := r.WatchdogPID()
	if !isWatchdog(t, wd) {
		t.Fatalf("process %d is not a running watchdog", wd)
	}
	death := watchDeath(t, wd)
	r.Close()
	death.wait(t)
	if alive(wd) {
		t.Fatalf("the watchdog %d outlived Close", wd) // Close also reaps it
	}
	r.Close() // a no-op

	ctx, cancel := context.WithTimeout(context.Background(), hang)
	defer cancel()
	if code, err := r.Run(ctx, b.c); code != exitcode.Failure || err == nil {
		t.Fatalf("Run after Close: %d, %v; want 125 and an error", code, err)
	}
	if info, err := b.c.Inspect(ctx, "early"); err != nil || info.Held || info.LastToken != 0 {
		t.Fatalf("Run after Close touched the lock: %+v, %v", info, err)
	}
}

// TestStartRefusesBadOptions: invalid options fail Start with ErrInvalid and
// start no watchdog.
func TestStartRefusesBadOptions(t *testing.T) {
	before := descendantsOf(t, os.Getpid())
	for _, o := range []supervise.Options{
		{Lock: "bad", TTL: time.Second},                                       // no command
		{Lock: "", TTL: time.Second, Command: []string{"true"}},               // no lock
		{Lock: "bad", TTL: time.Second, Command: []string{"true"}, Grace: -1}, // negative grace
		{Lock: "bad", TTL: time.Second, Command: []string{"true"}, MetricsFile: "/nonexistent/dir/m.prom"},
	} {
		r, err := supervise.Start(o)
		if r != nil || !errors.Is(err, coord.ErrInvalid) {
			t.Errorf("Start(%+v) = %v, %v; want ErrInvalid", o, r, err)
			if r != nil {
				r.Close()
			}
		}
	}
	for _, pid := range descendantsOf(t, os.Getpid()) {
		if !slices.Contains(before, pid) && isWatchdog(t, pid) {
			t.Errorf("a watchdog (%d) was started for invalid options", pid)
		}
	}
}

// TestStartedWatchdogHoldsTheLease: a watchdog started before the
// coordinator is opened is the one recorded with the lease (the local
// backend hands a lock over early only when fence and its watchdog are
// gone) and the one that runs the command; Run runs once.
func TestStartedWatchdogHoldsTheLease(t *testing.T) {
	dir := t.TempDir()
	pidFile, release := tempPath(t, "pid"), tempPath(t, "release")
	r, err := supervise.Start(supervise.Options{Lock: "started", TTL: 3 * time.Second, Location: map[string]string{"FENCE_STATE_DIR": dir},
		Command: []string{"echo $PPID > " + shell(pidFile) + "; while [ ! -e " + shell(release) + " ]; do sleep 0.02; done"}, Shell: true})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	wd := r.WatchdogPID()
	c, err := local.Open(dir) // opened after Start, as fence run does
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), hang)
	defer cancel()
	res := make(chan runResult, 1)
	go func() {
		code, err := r.Run(ctx, c)
		res <- runResult{code, err}
	}()
	if parent := pids(t, waitFile(t, pidFile, 1))[0]; parent != wd {
		t.Fatalf("the command's parent is %d, not the watchdog started first (%d)", parent, wd)
	}
	info, err := c.Inspect(ctx, "started")
	if err != nil || info.Process == nil || !slices.Contains(info.Process.PIDs, wd) || !slices.Contains(info.Process.PIDs, os.Getpid()) {
		t.Fatalf("the lease does not name fence and the watchdog %d: %+v, %v", wd, info.Process, err)
	}
	if err := os.WriteFile(release, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if got := <-res; got.code != 0 || got.err != nil {
		t.Fatalf("Run: %d, %v", got.code, got.err)
	}
	if alive(wd) {
		t.Fatalf("the watchdog %d outlived Run", wd)
	}
	if code, err := r.Run(ctx, c); code != exitcode.Failure || err == nil {
		t.Fatalf("second Run: %d, %v; want 125 and an error", code, err)
	}
	if info, err := c.Inspect(ctx, "started"); err != nil || info.Held || info.LastToken != 1 {
		t.Fatalf("after the run: %+v, %v; want free, one token issued", info, err)
	}
}
