package cli

import (
	"strings"
	"testing"

	"github.com/fence-dev/fence/internal/etcdproc"
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
