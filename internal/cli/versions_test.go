package cli

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/fence-dev/fence/internal/etcdproc"
	"github.com/fence-dev/fence/internal/etcdtest"
	"github.com/fence-dev/fence/internal/syncbuf"
	"github.com/fence-dev/fence/pkg/coord/etcd"
)

// TestVersionWarning: against Debian's etcd (3.4.23, which has etcd#15247)
// a command warns once on stderr, naming the member, its version, the bug
// and the fixed version; fence config lists the members' versions.
func TestVersionWarning(t *testing.T) {
	srv := etcdproc.Start(t)
	ep := srv.Endpoints()[0]
	code, _, errOut := run("status", "vw", "--endpoints", ep)
	if code != 1 {
		t.Fatalf("status exit %d: %s", code, errOut)
	}
	_, out, _ := run("config", "--endpoints", ep)
	if !strings.Contains(out, "server-versions\t"+ep+"=3.") {
		t.Fatalf("fence config has no server-versions row for %s:\n%s", ep, out)
	}
	if !strings.Contains(out, "=3.4.") || strings.Contains(out, "=3.4.3") {
		t.Skipf("Debian's etcd is not a 3.4 before 3.4.31 (%s): no warning expected", out)
	}
	lines := strings.Split(strings.TrimSpace(errOut), "\n")
	if len(lines) != 1 || !strings.HasPrefix(lines[0], "fence: warning: etcd "+ep+" runs 3.4.") ||
		!strings.Contains(lines[0], "etcd#15247, fixed in 3.4.31") {
		t.Errorf("stderr = %q, want one warning about etcd#15247", errOut)
	}
	if !strings.Contains(out, "(lease-safety bug etcd#15247)\tserver") {
		t.Errorf("fence config's row does not name the bug:\n%s", out)
	}
}

// TestRunAsksVersionsOnTheSide: for fence run (deferVersions) the
// coordinator is open, and the acquisition can go on, while the members'
// versions are still being asked; the warning comes when flushVersions
// waits for the answer (once the lease is held), once. Other commands ask
// before the coordinator is returned, as before.
func TestRunAsksVersionsOnTheSide(t *testing.T) {
	srv := etcdtest.Start(t)
	ep := srv.Endpoints()[0]
	var out, errOut syncbuf.Buffer
	f := NewFactory(Test(&out, &errOut))
	NewRootCmd(f) // defines the flags the configuration is read from
	if err := f.flags.Parse([]string{"--endpoints", ep}); err != nil {
		t.Fatal(err)
	}
	answer := make(chan struct{})
	var answered atomic.Bool
	f.askVersions = func(ctx context.Context, c *etcd.Coordinator) []etcd.MemberVersion {
		defer answered.Store(true)
		select {
		case <-answer:
		case <-ctx.Done(): // the question's own bound (a second)
		}
		return []etcd.MemberVersion{{Endpoint: ep, Version: "3.4.23"}}
	}
	f.deferVersions = true
	c, err := f.Coordinator(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if answered.Load() {
		t.Fatal("the coordinator was returned only once the question of the members' versions had ended")
	}
	defer c.Close()
	if errOut.String() != "" {
		t.Fatalf("warned before the answer: %q", errOut.String())
	}
	close(answer)
	f.flushVersions(nil)
	f.flushVersions(nil)
	if got := errOut.String(); strings.Count(got, "fence: warning: etcd ") != 1 || !strings.Contains(got, " runs 3.4.23, ") || strings.Count(got, "\n") != 1 {
		t.Fatalf("stderr = %q, want one warning", got)
	}
}
