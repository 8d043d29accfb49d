package e2e

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fence-dev/fence/internal/proc"
)

// revokeGuard bounds how long a revoked `fence run --ttl 60s` may take to
// stop its command and exit. It is half the renewal interval (20s): a stop
// within it was not found by a renewal. It only turns a miss into a
// failure; it is no measure of how fast the stop is.
const revokeGuard = 10 * time.Second

// TestRevokeStopsRunAtOnce: on etcd, `fence revoke L` ends the lease of a
// running `fence run --ttl 60s L` (with --force: at once, without asking the
// run to stop first); fence learns of it from its watch of the
// lease's key, not at its next renewal: the command's whole process group is
// gone and fence has exited 76 within revokeGuard, with the message and the
// history event of a lost lease. A run that ends by itself exits with the
// command's code.
func TestRevokeStopsRunAtOnce(t *testing.T) {
	be := etcdBackend(t)
	pidFile := filepath.Join(t.TempDir(), "pid")
	f := startFence(t, be.env, "run", "--ttl", "60s", "revoked", "--",
		"sh", "-c", `sleep 600 & echo $$ > "$0.tmp"; mv "$0.tmp" "$0"; wait`, pidFile)
	leader := waitLeader(t, pidFile)
	// The mv that published the pid file may not have exited yet.
	n := groupSize(t, leader)
	for end := time.Now().Add(5 * time.Second); n != 2 && time.Now().Before(end); n = groupSize(t, leader) {
		time.Sleep(10 * time.Millisecond)
	}
	if n != 2 {
		t.Fatalf("the command's group has %d live members, want 2 (sh and sleep)", n)
	}

	out, code := fence(t, be.env, "revoke", "--force", "revoked")
	if code != 0 {
		t.Fatalf("fence revoke: exit %d: %s", code, out)
	}
	revoked := time.Now()
	select {
	case <-f.done:
	case <-time.After(revokeGuard):
		t.Fatalf("fence run still runs %v after the revoke (renewals come every 20s); group members: %d",
			revokeGuard, groupSize(t, leader))
	}
	t.Logf("fence run exited %v after the revoke", time.Since(revoked).Round(time.Millisecond))
	if n := groupSize(t, leader); n != 0 {
		t.Fatalf("%d members of the command's group outlived fence", n)
	}
	runCode, runOut := f.wait(t)
	want := regexp.MustCompile(`(?m)^fence: lease on "revoked" \(token \d+\) was lost on the coordinator \(lease [0-9a-f]+ on "revoked" has ended\): the command was stopped \(SIGTERM\)$`)
	if runCode != 76 || !want.MatchString(runOut) {
		t.Fatalf("fence run: exit %d, output %q; want 76 and %s", runCode, runOut, want)
	}
	if out, _ := fence(t, be.env, "show", "revoked"); !strings.Contains(out, "\tlease_lost\t") {
		t.Errorf("fence show: no lease_lost event:\n%s", out)
	}

	// Ending by itself, the run releases its lease (deleting the key it
	// watches): the command's code, not 76.
	out, code = fence(t, be.env, "run", "--ttl", "60s", "revoked", "--", "sh", "-c", "sleep 0.2; exit 3")
	if code != 3 || out != "" {
		t.Fatalf("a run that ends by itself: exit %d, output %q; want 3 and nothing", code, out)
	}
}

// fence runs the fence binary to its end (hang-guarded) and returns its
// output and exit code.
func fence(t *testing.T, env []string, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(fenceBin, args...)
	cmd.Env = env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(hangGuard):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("fence %v did not exit within %v", args, hangGuard)
	}
	return out.String(), cmd.ProcessState.ExitCode()
}

// waitLeader waits for the command to write its PID and returns it as the
// leader of the command's process group.
func waitLeader(t *testing.T, path string) proc.ID {
	t.Helper()
	for end := time.Now().Add(hangGuard); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		b, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			t.Fatalf("bad pid file: %q", b)
		}
		st, err := proc.ReadStat(pid)
		if err != nil {
			t.Fatalf("command %d: %v", pid, err)
		}
		return st.ID()
	}
	t.Fatalf("the command never wrote %s", path)
	return proc.ID{}
}

// groupSize counts the live members of the group led by leader.
func groupSize(t *testing.T, leader proc.ID) int {
	t.Helper()
	ids, err := proc.GroupMembers(leader.PID, leader)
	if err != nil {
		t.Fatal(fmt.Errorf("members of group %d: %w", leader.PID, err))
	}
	n := 0
	for _, id := range ids {
		if st, err := proc.ReadStat(id.PID); err == nil && !st.Gone() {
			n++
		}
	}
	return n
}
