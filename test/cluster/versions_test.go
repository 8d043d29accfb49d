package cluster

import (
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/fence-dev/fence/internal/etcdproc"
)

// TestVersionQuestionStalledMember: one follower stopped (SIGSTOP), or cut
// off (its connections open and silent, through the proxies), the quorum
// intact. fence asks every member for its version, and that one never
// answers within the question's bound (a second); nothing waits
// for that answer but fence config: fence run starts its command, and
// fence list and fence acquire finish, before the question ends: each
// takes less than the question's bound. Before, every command waited for
// the bound: a second's delay on each while a member was silent.
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

// versionBound is the bound of the version question (internal/cli's
// versionTimeout).
const versionBound = time.Second

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
	for _, args := range [][]string{{"run", "versions-q", "--", "true"}, {"list"}, {"acquire", "versions-" + fault, "--ttl", "5s"}} {
		start := time.Now()
		out, err := exec.Command(fenceBin, append([]string{args[0], "--endpoints", eps}, args[1:]...)...).CombinedOutput()
		took := time.Since(start)
		if err != nil {
			t.Fatalf("fence %s, %s %s: %v\n%s", strings.Join(args, " "), follower.Name, fault, err, out)
		}
		t.Logf("fence %s, %s %s: %v", args[0], follower.Name, fault, took)
		if took >= versionBound {
			t.Errorf("fence %s took %v, the version question's bound (%v): it waited for the answer a member that does not answer holds up", args[0], took, versionBound)
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
