//go:build linux

package supervise_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fence-dev/fence/internal/exitcode"
	"github.com/fence-dev/fence/internal/supervise"
)

// cpuTicks is the CPU time pid has used so far (user + system), in clock
// ticks (1/100 s on Linux).
func cpuTicks(t *testing.T, pid int) int {
	t.Helper()
	s := readFile(t, "/proc/"+strconv.Itoa(pid)+"/stat")
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:]) // fields from 3 (state) on
	u, err1 := strconv.Atoi(f[11])                           // field 14: utime
	k, err2 := strconv.Atoi(f[12])                           // field 15: stime
	if err1 != nil || err2 != nil {
		t.Fatalf("cannot read the CPU time of %d: %q", pid, s)
	}
	return u + k
}

// TestFenceSleepsDuringGrace: while the command, which ignores the stop
// signal, has its grace period, fence has nothing to do but wait: it wakes
// at most every 100 ms. It once spun without sleeping from its own signal
// time (the watchdog had already signalled) to SIGKILL: about a CPU second
// per second of grace. fence runs as a process of its own, and its CPU time
// over one second of the grace is read from /proc.
func TestFenceSleepsDuringGrace(t *testing.T) {
	b := localBackend(t)
	ready := tempPath(t, "ready")
	f := startFence(t, b, supervise.Options{Lock: "grace-cpu", TTL: 15 * time.Second,
		Deadline: 300 * time.Millisecond, Grace: 3 * time.Second,
		Command: []string{"trap '' TERM; echo > " + shell(ready) + "; while :; do sleep 0.05; done"}, Shell: true})
	waitFile(t, ready, 1)
	time.Sleep(300*time.Millisecond + 500*time.Millisecond) // the deadline, fence's own signal time, and some
	pid := f.cmd.Process.Pid
	before := cpuTicks(t, pid)
	time.Sleep(time.Second)
	used := cpuTicks(t, pid) - before
	t.Logf("fence used %d ms of CPU in 1 s of the grace period", used*10)
	if code := f.wait(t); code != exitcode.Deadline {
		t.Fatalf("fence exited %d, want 124; stderr:\n%s", code, f.stderr.String())
	}
	// About ten wake-ups: a tick or two, twenty under heavy load at most.
	if used > 20 {
		t.Fatalf("fence used %d ms of CPU in 1 s of the command's grace period: it does not sleep", used*10)
	}
}
