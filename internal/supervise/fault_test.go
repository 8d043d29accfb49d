//go:build linux

package supervise_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fence-dev/fence/internal/clock"
	"github.com/fence-dev/fence/internal/exitcode"
	"github.com/fence-dev/fence/internal/supervise"
	"github.com/fence-dev/fence/pkg/coord"
)

// noteMargin logs a measured margin between a command's death and the
// moment its lease could be taken (go test -v shows it).
func noteMargin(t *testing.T, format string, args ...any) {
	t.Helper()
	t.Logf(format, args...)
}

// TestFencePaused: fence alone (not the command) is frozen with SIGSTOP
// past the TTL. The watchdog stops the command before the lease expires;
// after SIGCONT fence exits 76; the next holder's token is higher.
func TestFencePaused(t *testing.T) {
	for _, bk := range backends {
		testFencePaused(t, bk.name, bk.open)
	}
}

func testFencePaused(t *testing.T, name string, open func(*testing.T) *backend) {
	t.Run(name, func(t *testing.T) {
		b := open(t)
		dir := t.TempDir()
		pidFile, tokFile := dir+"/pid", dir+"/token"
		const ttl = 2 * time.Second
		f := startFence(t, b, supervise.Options{Lock: "paused", TTL: ttl,
			// The command ignores TERM: it dies only of the SIGKILL at the
			// end of the grace period, the worst case for the margin.
			Command: []string{"trap '' TERM; echo $FENCE_TOKEN > " + shell(tokFile) + "; echo $$ > " + shell(pidFile) + "; while :; do sleep 0.05; done"}, Shell: true})
		pid := pids(t, waitFile(t, pidFile, 1))[0]
		token, _ := strconv.ParseUint(waitFile(t, tokFile, 1)[0], 10, 64)
		death := watchDeath(t, pid)
		time.Sleep(ttl / 2) // let fence renew at least once

		if err := f.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		stopped := clock.Now()
		ctx, cancel := context.WithTimeout(context.Background(), hang)
		defer cancel()
		// The lease's expiry as the coordinator sees it, read after the
		// freeze (no renewal can come after it; whole seconds on etcd).
		before := clock.Now()
		info, err := b.c.Inspect(ctx, "paused")
		if err != nil || !info.Held || info.Token != token {
			t.Fatalf("lock while fence is frozen: %+v, %v", info, err)
		}
		expiry := before.Add(info.TTLLeft)

		type acquired struct {
			l   *coord.Lease
			at  clock.Boot
			err error
		}
		next := make(chan acquired, 1)
		go func() {
			l, err := b.c.Acquire(ctx, "paused", coord.AcquireOptions{TTL: ttl, Wait: coord.WaitForever, Holder: "successor"})
			next <- acquired{l, clock.Now(), err}
		}()
		died := death.wait(t)
		a := <-next
		if a.err != nil {
			t.Fatal(a.err)
		}
		defer b.c.Release(context.Background(), a.l.Name, a.l.ID)
		if died >= a.at {
			t.Fatalf("the command died %v after the successor took the lock", died.Sub(a.at))
		}
		if a.l.Token <= token {
			t.Fatalf("successor's token %d is not above %d", a.l.Token, token)
		}
		msg := fmt.Sprintf("command (ignoring TERM) dead %v after the freeze; %v before the successor held the lock",
			died.Sub(stopped).Round(time.Millisecond), a.at.Sub(died).Round(time.Millisecond))
		if b.stateDir != "" { // etcd reports the TTL left in whole seconds only
			msg += fmt.Sprintf("; %v before the lease's expiry read from the coordinator", expiry.Sub(died).Round(time.Millisecond))
		}
		noteMargin(t, "%s (TTL %v, margin 200ms, grace 400ms)", msg, ttl)

		if err := f.cmd.Process.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		f.expectLost(t, "process was paused")
	})
}

// treeScript starts a command that ignores TERM and leaves descendants in
// every way it can: a background child, a child in a new session (setsid),
// one that set up its own session and whose parent exited at once (an
// orphan, re-parented to the watchdog as subreaper), and a grandchild of a
// new session. Each writes its PID to $P; six lines in all.
const treeScript = `trap '' TERM
echo $$ >> "$P"
sh -c 'echo $$ >> "$P"; exec sleep 300' &
setsid sh -c 'echo $$ >> "$P"; exec sleep 300' &
setsid sh -c 'sh -c '\''echo $$ >> "$P"; exec sleep 300'\'' &'
setsid sh -c 'sh -c '\''echo $$ >> "$P"; exec sleep 300'\'' & echo $$ >> "$P"; wait' &
wait`

const treeLines = 6

var modes = []struct {
	name     string
	noCgroup bool
}{{"cgroup", false}, {"subreaper", true}}

// TestStopKillsWholeTree: at the deadline the whole tree gets TERM, which it
// ignores, then SIGKILL after the grace period: when fence returns, no
// process of the tree is left, whether it is found through a cgroup or as
// the watchdog's descendants.
func TestStopKillsWholeTree(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			b := localBackend(t)
			list := tempPath(t, "pids")
			start := time.Now()
			code, err := run(t, b, supervise.Options{Lock: "tree", TTL: 3 * time.Second, Deadline: 500 * time.Millisecond,
				Grace: 300 * time.Millisecond, Command: []string{treeScript}, Shell: true, NoCgroup: m.noCgroup,
				Env: append(os.Environ(), "P="+list)})
			took := time.Since(start)
			if code != exitcode.Deadline || err == nil || !strings.Contains(err.Error(), "then SIGKILL after 300ms") {
				t.Fatalf("code %d, %v; want 124 after SIGKILL", code, err)
			}
			ps := pids(t, waitFile(t, list, treeLines))
			assertAllDead(t, ps)
			if took < 800*time.Millisecond {
				t.Fatalf("returned after %v: before deadline + grace", took)
			}
		})
	}
}

// TestCgroupHoldsCommand: where a cgroup can be made (here, as root on a
// hybrid cgroup v1/v2 machine), the command runs in one of its own, which is
// gone afterwards.
func TestCgroupHoldsCommand(t *testing.T) {
	b := localBackend(t)
	out := tempPath(t, "cgroup")
	code, err := run(t, b, supervise.Options{Lock: "cg", TTL: 2 * time.Second,
		Command: []string{"sh", "-c", "grep '^0::' /proc/self/cgroup > " + shell(out)}})
	if code != 0 || err != nil {
		t.Fatalf("code %d, %v", code, err)
	}
	line := strings.TrimSpace(readFile(t, out))
	if !strings.Contains(line, "/fence-run-") {
		t.Skipf("no cgroup of its own here (%s): the subreaper mode is tested instead", line)
	}
	cg := strings.TrimPrefix(line, "0::")
	for _, root := range []string{"/sys/fs/cgroup/unified", "/sys/fs/cgroup"} {
		if _, err := os.Stat(root + cg); err == nil {
			t.Fatalf("cgroup %s%s left behind", root, cg)
		}
	}
}

// TestCgroupLeftByKilledWatchdogSwept: fence and its watchdog are killed
// at once (SIGKILL to both, as `pkill -9 fence` or the OOM killer does):
// the command dies of its parent-death signal, but nobody is left to remove
// its cgroup. The next watchdog removes it once its own command runs (and
// the cgroup is two seconds old), and leaves alone the cgroup of a watchdog
// that lives.
func TestCgroupLeftByKilledWatchdogSwept(t *testing.T) {
	b := localBackend(t)
	// cgroupOf starts fence run with a long command and returns the
	// command's cgroup directory, its PID and its watchdog's.
	cgroupOf := func(lock string) (*fenceProc, string, int, int) {
		dir := t.TempDir()
		f := startFence(t, b, supervise.Options{Lock: lock, TTL: 10 * time.Second, Shell: true,
			Command: []string{"grep '^0::' /proc/self/cgroup > " + shell(dir+"/cg") + "; echo $$ > " + shell(dir+"/pid") + "; exec sleep 300"}})
		pid := pids(t, waitFile(t, dir+"/pid", 1))[0]
		line := strings.TrimSpace(readFile(t, dir+"/cg"))
		if !strings.Contains(line, "/fence-run-") {
			t.Skipf("no cgroup of its own here (%s)", line)
		}
		cg := strings.TrimPrefix(line, "0::")
		for _, root := range []string{"/sys/fs/cgroup/unified", "/sys/fs/cgroup"} {
			if _, err := os.Stat(root + cg + "/cgroup.procs"); err == nil {
				st, err := procStat(pid)
				if err != nil {
					t.Fatal(err)
				}
				return f, root + cg, pid, st.PPID
			}
		}
		t.Fatalf("cgroup %s not found", cg)
		return nil, "", 0, 0
	}

	f, left, cmd, watchdog := cgroupOf("swept-killed")
	// Both stopped first, so that neither runs a line of its own clean-up
	// before it dies.
	for _, pid := range []int{f.cmd.Process.Pid, watchdog} {
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
	}
	for _, pid := range []int{f.cmd.Process.Pid, watchdog} {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
	}
	f.wait(t)
	waitAllDead(t, []int{cmd, watchdog})
	if _, err := os.Stat(left); err != nil {
		t.Fatalf("the killed watchdog's cgroup is gone already (%v): this test would prove nothing", err)
	}
	// Beside it, two made by hand: one whose PID now names a process that
	// started after the cgroup's time (a reused PID: its maker is gone),
	// one whose maker is this test process, alive and older than its time.
	base := filepath.Dir(left)
	reused := filepath.Join(base, fmt.Sprintf("fence-run-%d-%d", os.Getpid(), 1))
	ours := filepath.Join(base, fmt.Sprintf("fence-run-%d-%d", os.Getpid(), clock.Now()))
	for _, d := range []string{reused, ours} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = os.Remove(d) })
	}
	time.Sleep(2 * time.Second) // a cgroup younger than that is never swept

	live, kept, liveCmd, _ := cgroupOf("swept-live")
	code, err := run(t, b, supervise.Options{Lock: "swept-next", TTL: 2 * time.Second, Command: []string{"true"}})
	if code != 0 || err != nil {
		t.Fatalf("code %d, %v", code, err)
	}
	if _, err := os.Stat(left); !os.IsNotExist(err) {
		t.Errorf("the killed watchdog's cgroup %s is still there after the next run (%v)", left, err)
	}
	if _, err := os.Stat(reused); !os.IsNotExist(err) {
		t.Errorf("the cgroup %s of a reused PID is still there (%v)", reused, err)
	}
	if _, err := os.Stat(ours); err != nil {
		t.Errorf("the cgroup %s of a live maker was removed (%v)", ours, err)
	}
	if _, err := os.Stat(kept); err != nil || !alive(liveCmd) {
		t.Errorf("a live watchdog's cgroup %s was touched: %v, its command alive %v", kept, err, alive(liveCmd))
	}
	_ = live.cmd.Process.Signal(syscall.SIGTERM)
	live.wait(t)
	if _, err := os.Stat(kept); !os.IsNotExist(err) {
		t.Errorf("cgroup %s left behind by a run that ended normally (%v)", kept, err)
	}
}

// TestLeftoversStopped: the command exits at once, leaving a background
// process in a session of its own: it is stopped before fence releases the
// lock, and the exit code is the command's.
func TestLeftoversStopped(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			b := localBackend(t)
			list := tempPath(t, "pids")
			code, err := run(t, b, supervise.Options{Lock: "leftovers", TTL: 3 * time.Second, NoCgroup: m.noCgroup,
				Command: []string{`: > "$P"; setsid sh -c 'echo $$ >> "$P"; exec sleep 300' & sh -c 'echo $$ >> "$P"; exec sleep 300' & while [ "$(wc -l < "$P")" -lt 2 ]; do sleep 0.01; done; exit 5`},
				Shell:   true, Env: append(os.Environ(), "P="+list)})
			if code != 5 || err != nil {
				t.Fatalf("code %d, %v; want 5", code, err)
			}
			assertAllDead(t, pids(t, waitFile(t, list, 2)))
		})
	}
}

// TestFenceKilled: fence dies by SIGKILL; the watchdog sees its pipe close
// and stops the command's whole tree (TERM, ignored; SIGKILL after grace).
func TestFenceKilled(t *testing.T) {
	for _, m := range modes {
		testFenceKilled(t, m.name, m.noCgroup)
	}
}

func testFenceKilled(t *testing.T, name string, noCgroup bool) {
	t.Run(name, func(t *testing.T) {
		b := localBackend(t)
		list := tempPath(t, "pids")
		o := supervise.Options{Lock: "killed", TTL: 10 * time.Second, Grace: 300 * time.Millisecond,
			Command: []string{treeScript}, Shell: true, NoCgroup: noCgroup, Env: append(os.Environ(), "P="+list)}
		f := startFence(t, b, o)
		ps := pids(t, waitFile(t, list, treeLines))
		st, err := procStat(ps[0])
		if err != nil {
			t.Fatal(err)
		}
		watchdog := st.PPID
		if err := f.cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		killed := time.Now()
		f.wait(t)
		waitAllDead(t, append(ps, watchdog))
		t.Logf("tree of %d processes and the watchdog gone %v after fence's SIGKILL (grace 300ms)", len(ps), time.Since(killed).Round(time.Millisecond))
	})
}

// TestSignalsForwarded: SIGTERM, SIGINT and SIGHUP sent to fence reach the
// command's group; fence waits, releases and exits with the command's
// status.
func TestSignalsForwarded(t *testing.T) {
	b := localBackend(t)
	cases := []struct {
		sig    syscall.Signal
		script string
		code   int
	}{
		{syscall.SIGTERM, `trap 'echo TERM > "$D/got"; exit 42' TERM`, 42},
		{syscall.SIGINT, ``, 128 + 2},
		{syscall.SIGHUP, ``, 128 + 1},
	}
	for _, tc := range cases {
		t.Run(supervise.SignalName(tc.sig), func(t *testing.T) {
			dir := t.TempDir()
			// (The shell's own "Terminated" about its sleep is not fence's.)
			script := "exec 2>/dev/null\n" + tc.script + "\necho ready > \"$D/ready\"\nwhile :; do sleep 0.02; done"
			f := startFence(t, b, supervise.Options{Lock: "signals", TTL: 3 * time.Second, Command: []string{script}, Shell: true,
				Env: append(os.Environ(), "D="+dir)})
			waitFile(t, dir+"/ready", 1)
			if err := f.cmd.Process.Signal(tc.sig); err != nil {
				t.Fatal(err)
			}
			if code := f.wait(t); code != tc.code {
				t.Fatalf("fence exited %d, want %d; stderr:\n%s", code, tc.code, f.stderr.String())
			}
			if f.stderr.Len() != 0 {
				t.Fatalf("fence said: %s", f.stderr.String())
			}
			if tc.sig == syscall.SIGTERM && strings.TrimSpace(readFile(t, dir+"/got")) != "TERM" {
				t.Fatal("the trap did not run")
			}
			if info, _ := b.c.Inspect(context.Background(), "signals"); info.Held {
				t.Fatal("the lock was not released")
			}
		})
	}
}

// TestContention: 20 fence processes run at once on one lock; each command
// appends begin and end marks to a log. No two intervals overlap and the
// tokens grow in log order.
func TestContention(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("40 processes: too slow with -short or -race (each is race-instrumented)")
	}
	for _, bk := range backends {
		t.Run(bk.name, func(t *testing.T) {
			b := bk.open(t)
			log := tempPath(t, "log")
			const n = 20
			var fs []*fenceProc
			for range n {
				fs = append(fs, startFence(t, b, supervise.Options{Lock: "contended", TTL: 5 * time.Second, Wait: coord.WaitForever,
					Command: []string{`echo "begin $FENCE_TOKEN" >> "$L"; sleep 0.01; echo "end $FENCE_TOKEN" >> "$L"`}, Shell: true,
					Env: append(os.Environ(), "L="+log)}))
			}
			for i, f := range fs {
				if code := f.wait(t); code != 0 {
					t.Fatalf("fence %d exited %d: %s", i, code, f.stderr.String())
				}
			}
			lines := strings.Split(strings.TrimSpace(readFile(t, log)), "\n")
			if len(lines) != 2*n {
				t.Fatalf("%d log lines, want %d", len(lines), 2*n)
			}
			var tokens []uint64
			for i := 0; i < len(lines); i += 2 {
				var b, e uint64
				if _, err := fmt.Sscanf(lines[i], "begin %d", &b); err != nil {
					t.Fatalf("line %d %q: intervals overlap", i, lines[i])
				}
				if _, err := fmt.Sscanf(lines[i+1], "end %d", &e); err != nil || e != b {
					t.Fatalf("line %d %q after begin %d: intervals overlap", i+1, lines[i+1], b)
				}
				tokens = append(tokens, b)
			}
			if !sort.SliceIsSorted(tokens, func(i, j int) bool { return tokens[i] < tokens[j] }) {
				t.Fatalf("tokens not increasing in log order: %v", tokens)
			}
		})
	}
}

// TestSignalWhileWaiting: a signal to fence while it waits for the lock ends
// the wait: 128+N, nothing ran, no watchdog left.
func TestSignalWhileWaiting(t *testing.T) {
	b := localBackend(t)
	ctx := context.Background()
	l, err := b.c.Acquire(ctx, "waiting", coord.AcquireOptions{TTL: 30 * time.Second, Holder: "first"})
	if err != nil {
		t.Fatal(err)
	}
	defer b.c.Release(ctx, l.Name, l.ID)
	ran := tempPath(t, "ran")
	f := startFence(t, b, supervise.Options{Lock: "waiting", TTL: 3 * time.Second, Wait: coord.WaitForever,
		Command: []string{"touch", ran}})
	// Wait until fence is queued behind the holder.
	end := time.Now().Add(hang)
	for {
		info, err := b.c.Inspect(ctx, "waiting")
		if err == nil && info.Waiters > 0 {
			break
		}
		if time.Now().After(end) {
			t.Fatal("fence never queued")
		}
		time.Sleep(10 * time.Millisecond)
	}
	children := descendantsOf(t, f.cmd.Process.Pid)
	if len(children) == 0 {
		t.Fatal("no watchdog was started while waiting")
	}
	if err := f.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if code := f.wait(t); code != 128+2 {
		t.Fatalf("fence exited %d, want 130; stderr:\n%s", code, f.stderr.String())
	}
	if !strings.Contains(f.stderr.String(), "interrupted by SIGINT while waiting") {
		t.Fatalf("stderr: %s", f.stderr.String())
	}
	waitAllDead(t, children)
	if _, err := os.Stat(ran); err == nil {
		t.Fatal("the command ran")
	}
}
