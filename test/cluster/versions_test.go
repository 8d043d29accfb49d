package cluster

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fence-dev/fence/internal/benchtrace"
	"github.com/fence-dev/fence/internal/etcdproc"
)

// TestVersionQuestionStalledMember: one follower stopped (SIGSTOP), or cut
// off (its connections open and silent, through the proxies), the quorum
// intact. fence asks every member for its version, and that one never
// answers within the question's bound (a second); nothing waits
// for that answer but fence config: fence run starts its command, and
// fence list and fence acquire finish, before the question ends. Its
// "versions" mark (FENCE_BENCH_TRACE: every member answered, or the bound
// passed) is after the command's start, or not there at all because fence
// closed the coordinator, ending the question, and exited first. Before,
// every command waited for the bound: a second's delay on each while a
// member was silent.
func TestVersionQuestionStalledMember(t *testing.T) {
	eachVersion(t, func(t *testing.T, c *etcdproc.Cluster, version string) {
		for _, fault := range []string{"stop", "partition"} {
			t.Run(fault, func(t *testing.T) {
				if err := c.WaitHealthy(30 * time.Second); err != nil {
					t.Fatal(err)
				}
				versionQuestion(t, c, fault)
			})
		}
	})
}

// versionQuestion runs the commands with a follower silenced by fault.
func versionQuestion(t *testing.T, c *etcdproc.Cluster, fault string) {
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
	if fault == "stop" {
		if err := follower.Freeze(); err != nil {
			t.Fatal(err)
		}
		defer follower.Thaw()
	} else {
		follower.Partition(true)
		defer follower.Partition(false)
	}
	eps := strings.Join(c.Endpoints(), ",")
	dir := t.TempDir()
	// phases runs fence with a trace and returns its phases in order.
	phases := func(name string, args ...string) []string {
		t.Helper()
		trace := filepath.Join(dir, name)
		cmd := exec.Command(fenceBin, append([]string{args[0], "--endpoints", eps}, args[1:]...)...)
		cmd.Env = append(os.Environ(), benchtrace.Env+"="+trace)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("fence %s, %s %s: %v\n%s", strings.Join(args, " "), follower.Name, fault, err, out)
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
	run := phases("run", "run", "versions-q", "--", "true")
	cs, vs := slices.Index(run, benchtrace.CommandStart), slices.Index(run, benchtrace.Versions)
	t.Logf("fence run, %s %s: %v", follower.Name, fault, run)
	if cs < 0 || (vs >= 0 && vs < cs) {
		t.Errorf("fence run's command started only after the version question ended (a member that does not answer held it up): %v", run)
	}
	for _, args := range [][]string{{"list"}, {"acquire", "versions-" + fault, "--ttl", "5s"}} {
		ps := phases(args[0], args...)
		t.Logf("fence %s, %s %s: %v", args[0], follower.Name, fault, ps)
		if slices.Contains(ps, benchtrace.Versions) {
			t.Errorf("fence %s waited for the version question, which a member that does not answer holds up: %v", args[0], ps)
		}
	}
	// fence config shows the versions: it waits for the whole answer,
	// the silent member's unknown.
	out, err := exec.Command(fenceBin, "config", "--endpoints", eps).CombinedOutput()
	if err != nil {
		t.Fatalf("fence config: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), follower.ClientAddr()+"=?") {
		t.Errorf("fence config does not show the silent member's version as unknown:\n%s", out)
	}
}
