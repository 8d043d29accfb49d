package e2e

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fence-dev/fence/internal/proc"
)

// stubborn is a command that ignores SIGTERM, as does its child (an ignored
// signal stays ignored across fork and exec): only SIGKILL at the end of the
// grace ends it. It writes its PID and its child's to the file $1 once both
// run, then waits.
const stubborn = `trap '' TERM; sleep 600 & echo $$ $! > "$1.tmp"; mv "$1.tmp" "$1"; wait`

// successor is the next holder's command: at its start it looks at every
// process of the old command (PIDs in the file $1) and says "overlap" when one
// of them still runs, else "clean".
const successor = `for p in $(cat "$1"); do s=$(cut -d" " -f3 /proc/$p/stat 2>/dev/null); case $s in ""|Z|X) ;; *) echo "overlap: $p is $s"; exit 9;; esac; done; echo "clean token $FENCE_TOKEN"`

// readTree waits for the PIDs file of stubborn and returns its processes.
func readTree(t *testing.T, path string) []proc.ID {
	t.Helper()
	for end := time.Now().Add(hangGuard); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		b, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		var ids []proc.ID
		for _, f := range strings.Fields(string(b)) {
			pid, err := strconv.Atoi(f)
			if err != nil {
				t.Fatalf("bad pid file: %q", b)
			}
			st, err := proc.ReadStat(pid)
			if err != nil {
				t.Fatalf("command process %d: %v", pid, err)
			}
			ids = append(ids, st.ID())
		}
		return ids
	}
	t.Fatalf("the command never wrote %s", path)
	return nil
}

// alive counts the processes of ids that still run (zombies count as gone).
func aliveOf(ids []proc.ID) int {
	n := 0
	for _, id := range ids {
		if proc.Check(id) != proc.Gone {
			n++
		}
	}
	return n
}

// waitWaiters waits until lock has n waiters.
func waitWaiters(t *testing.T, env []string, lock string, n int) {
	t.Helper()
	want := regexp.MustCompile(`(?m)^waiters:\s+` + strconv.Itoa(n) + `$`)
	for end := time.Now().Add(hangGuard); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if out, _ := fence(t, env, "status", lock); want.MatchString(out) {
			return
		}
	}
	t.Fatalf("lock %s never had %d waiters", lock, n)
}

var revokedLine = regexp.MustCompile(`(?m)^fence: lease on "\S+" \(token \d+\) was revoked \(fence revoke asked this run to stop and release it\): the command was stopped \(SIGTERM, then SIGKILL after 1s\)$`)

// TestRevokeWithoutOverlap, on every coordinator: `fence revoke L` (no
// --force) while `fence run --ttl 30s --grace 1s L` runs a command that
// ignores SIGTERM and another `fence run L` waits. The revoke asks the holder
// to stop: its command gets SIGTERM, then SIGKILL after the grace; once its
// tree is gone the holder releases, and only then does the revoke return
// (so it took the grace at least) and the waiter start, finding no process
// of the old command alive. The holder exits 76 saying it was revoked. The
// ask is noticed at once on every coordinator: the revoke returns well
// within a renewal interval (10s), not at the holder's next renewal.
func TestRevokeWithoutOverlap(t *testing.T) {
	for _, mk := range []func(*testing.T) backend{localBackend, etcdBackend, pgBackend} {
		be := mk(t)
		t.Run(be.name, func(t *testing.T) {
			dir := t.TempDir()
			pids := filepath.Join(dir, "pids")
			holder := startFence(t, be.env, "run", "--ttl", "30s", "--grace", "1s", "ask", "--", "sh", "-c", stubborn, "sh", pids)
			old := readTree(t, pids)
			waiter := startFence(t, be.env, "run", "--wait", "60s", "ask", "--", "sh", "-c", successor, "sh", pids)
			waitWaiters(t, be.env, "ask", 1)

			start := time.Now()
			out, code := fence(t, be.env, "revoke", "ask")
			took := time.Since(start)
			left := aliveOf(old)
			t.Logf("%s: fence revoke returned after %v", be.name, took.Round(time.Millisecond))
			if code != 0 || !strings.HasPrefix(out, "revoked ask: lease ") {
				t.Fatalf("fence revoke: exit %d, output %q; want 0 and the lease it ended", code, out)
			}
			if left != 0 {
				t.Errorf("fence revoke returned while %d processes of the old command still ran", left)
			}
			if took < time.Second {
				t.Errorf("fence revoke returned after %v, before the holder's grace (1s) could have passed: it did not wait for the release", took)
			}
			if took > 5*time.Second {
				t.Errorf("fence revoke took %v: the ask was not noticed at once (renewals come every 10s)", took)
			}
			hcode, hout := holder.wait(t)
			if hcode != 76 || !revokedLine.MatchString(hout) {
				t.Errorf("the revoked holder: exit %d, output %q; want 76 and %s", hcode, hout, revokedLine)
			}
			wcode, wout := waiter.wait(t)
			if wcode != 0 || !strings.Contains(wout, "clean token") {
				t.Errorf("the next holder: exit %d, output %q; want 0 and no overlap", wcode, wout)
			}
			if out, _ := fence(t, be.env, "show", "ask"); !strings.Contains(out, "\trevoked\t") || !strings.Contains(out, "\tlease_lost\t") {
				t.Errorf("fence show: want revoked and lease_lost events:\n%s", out)
			}
		})
	}
}

// TestRevokeForceTokenAcquire, on every coordinator: --token N of another
// holder exits 1 and changes nothing; --force ends the lease at once, without
// waiting for the holder's grace (its command still runs when the revoke
// returns), and the holder exits 76; a lease from `fence acquire` (no fence
// run attached) is ended at once without --force; a free lock is 1.
func TestRevokeForceTokenAcquire(t *testing.T) {
	for _, mk := range []func(*testing.T) backend{localBackend, etcdBackend, pgBackend} {
		be := mk(t)
		t.Run(be.name, func(t *testing.T) {
			pids := filepath.Join(t.TempDir(), "pids")
			holder := startFence(t, be.env, "run", "--ttl", "30s", "--grace", "5s", "lk", "--", "sh", "-c", stubborn, "sh", pids)
			old := readTree(t, pids)
			st, _ := fence(t, be.env, "status", "lk", "-o", "json")
			m := regexp.MustCompile(`"token": (\d+)`).FindStringSubmatch(st)
			if m == nil {
				t.Fatalf("status: no token in %s", st)
			}
			tok, _ := strconv.ParseUint(m[1], 10, 64)

			out, code := fence(t, be.env, "revoke", "lk", "--token", strconv.FormatUint(tok+1, 10))
			want := "fence: revoke lk: held by "
			if code != 1 || !strings.HasPrefix(out, want) || !strings.Contains(out, "under token "+m[1]+", not ") {
				t.Errorf("revoke --token of another holder: exit %d, output %q; want 1 and %q...", code, out, want)
			}
			if st2, _ := fence(t, be.env, "status", "lk", "-o", "json"); !strings.Contains(st2, `"token": `+m[1]) || holder.exited() || aliveOf(old) != 2 {
				t.Fatalf("revoke --token of another holder changed something: %s (holder exited %v, %d of 2 processes alive)", st2, holder.exited(), aliveOf(old))
			}

			start := time.Now()
			out, code = fence(t, be.env, "revoke", "lk", "--force", "--token", m[1])
			took := time.Since(start)
			left := aliveOf(old)
			if code != 0 || !strings.HasPrefix(out, "revoked lk: lease ") {
				t.Fatalf("revoke --force: exit %d, output %q", code, out)
			}
			if left == 0 || took > 3*time.Second {
				t.Errorf("revoke --force returned after %v with %d processes of the command alive: it waited for the holder (grace 5s)", took, left)
			}
			if hcode, hout := holder.wait(t); hcode != 76 {
				t.Errorf("the holder after revoke --force: exit %d, output %q; want 76", hcode, hout)
			}

			if out, code := fence(t, be.env, "acquire", "lk", "--ttl", "60s"); code != 0 {
				t.Fatalf("acquire: exit %d: %s", code, out)
			}
			start = time.Now()
			out, code = fence(t, be.env, "revoke", "lk", "-o", "json")
			took = time.Since(start)
			if code != 0 || !strings.Contains(out, `"ended": "revoked"`) || took > 3*time.Second {
				t.Errorf("revoke of an acquire lease: exit %d after %v, output %q; want 0 at once, ended revoked", code, took, out)
			}
			if out, code := fence(t, be.env, "status", "lk"); code != 1 {
				t.Errorf("status after the revoke: exit %d: %s", code, out)
			}
			if out, code := fence(t, be.env, "revoke", "lk"); code != 1 || out != "fence: revoke lk: the lock is free\n" {
				t.Errorf("revoke of a free lock: exit %d, output %q", code, out)
			}
		})
	}
}

// TestRevokeFrozenHolder, on every coordinator: a holder whose whole tree is
// frozen (SIGSTOP) cannot answer the ask: `fence revoke --timeout 1s` waits
// the timeout, says so, and ends the lease (exit 0); resumed, the holder
// exits 76.
func TestRevokeFrozenHolder(t *testing.T) {
	for _, mk := range []func(*testing.T) backend{localBackend, etcdBackend, pgBackend} {
		be := mk(t)
		t.Run(be.name, func(t *testing.T) {
			pids := filepath.Join(t.TempDir(), "pids")
			holder := startFence(t, be.env, "run", "--ttl", "30s", "frozen", "--", "sh", "-c", stubborn, "sh", pids)
			old := readTree(t, pids)
			tree, err := treeOf(holder.cmd.Process.Pid, old[0].PID)
			if err != nil {
				t.Fatal(err)
			}
			if err := tree.freeze(); err != nil {
				t.Fatal(err)
			}
			defer thawTree(tree)
			if err := waitStopped(tree.fence, tree.watchdog); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			out, code := fence(t, be.env, "revoke", "frozen", "--timeout", "1s")
			took := time.Since(start)
			t.Logf("%s: fence revoke returned after %v", be.name, took.Round(time.Millisecond))
			if code != 0 || !strings.Contains(out, "fence: revoke frozen: the holder did not release the lease within 1s: ending it\n") ||
				!strings.Contains(out, "revoked frozen: lease ") {
				t.Fatalf("revoke of a frozen holder: exit %d, output %q", code, out)
			}
			if took < time.Second || took > 10*time.Second {
				t.Errorf("revoke of a frozen holder took %v; want its --timeout (1s), a little more", took)
			}
			thawTree(tree)
			if hcode, hout := holder.wait(t); hcode != 76 {
				t.Errorf("the resumed holder: exit %d, output %q; want 76", hcode, hout)
			}
		})
	}
}
