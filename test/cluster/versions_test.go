package cluster

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fence-dev/fence/internal/benchtrace"
	"github.com/fence-dev/fence/internal/etcdproc"
)

// TestVersionQuestionStalledMember: one follower stopped (SIGSTOP), the
// quorum intact. fence asks every member for its version, and the stopped
// one never answers within the question's bound (a second); nothing waits
// for that answer but fence config: fence run starts its command, and
// fence list and fence acquire finish, before the question ends. Its
// "versions" mark (FENCE_BENCH_TRACE: every member answered, or the bound
// passed) is after the command's start, or not there at all because fence
// closed the coordinator, ending the question, and exited first. Before,
// every command waited for the bound: a second's delay on each while a
// member was stopped.
func TestVersionQuestionStalledMember(t *testing.T) {
	eachVersion(t, func(t *testing.T, c *etcdproc.Cluster, version string) {
		var follower *etcdproc.Member
		leader := c.Leader()
		for _, m := range c.Members {
			if m != leader {
				follower = m
				break
			}
		}
		if follower == nil {
			t.Fatal("no follower")
		}
		if err := follower.Freeze(); err != nil {
			t.Fatal(err)
		}
		defer follower.Thaw()
		eps := strings.Join(c.Endpoints(), ",")
		dir := t.TempDir()
		// phases runs fence with a trace and returns its phases in order.
		phases := func(name string, args ...string) []string {
			t.Helper()
			trace := filepath.Join(dir, name)
			cmd := exec.Command(fenceBin, append([]string{args[0], "--endpoints", eps}, args[1:]...)...)
			cmd.Env = append(os.Environ(), benchtrace.Env+"="+trace)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("fence %s with %s stopped: %v\n%s", strings.Join(args, " "), follower.Name, err, out)
			}
			b, err := os.ReadFile(trace)
			if err != nil {
				t.Fatal(err)
			}
			var ps []string
			for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
				ps = append(ps, strings.Fields(line)[0])
			}
			return ps
		}
		index := func(ps []string, p string) int {
			for i, q := range ps {
				if q == p {
					return i
				}
			}
			return -1
		}
		run := phases("run", "run", "versions-q", "--", "true")
		cs, vs := index(run, benchtrace.CommandStart), index(run, benchtrace.Versions)
		t.Logf("fence run, %s stopped: %v", follower.Name, run)
		if cs < 0 || (vs >= 0 && vs < cs) {
			t.Errorf("fence run's command started only after the version question ended (a stopped member held it up): %v", run)
		}
		for _, args := range [][]string{{"list"}, {"acquire", "versions-a", "--ttl", "5s"}} {
			ps := phases(args[0], args...)
			t.Logf("fence %s, %s stopped: %v", args[0], follower.Name, ps)
			if index(ps, benchtrace.Versions) >= 0 {
				t.Errorf("fence %s waited for the version question, which a stopped member holds up: %v", args[0], ps)
			}
		}
		// fence config shows the versions: it waits for the whole answer,
		// the stopped member's unknown.
		out, err := exec.Command(fenceBin, "config", "--endpoints", eps).CombinedOutput()
		if err != nil {
			t.Fatalf("fence config: %v\n%s", err, out)
		}
		if !strings.Contains(string(out), follower.ClientAddr()+"=?") {
			t.Errorf("fence config does not show the stopped member's version as unknown:\n%s", out)
		}
	})
}
