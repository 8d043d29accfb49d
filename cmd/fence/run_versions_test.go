package main

import (
	"os/exec"
	"strings"
	"testing"

	st "github.com/fence-dev/fence/cmd/fence/internal/scripttest"
	"github.com/fence-dev/fence/internal/etcdproc"
)

// TestRunVersionWarning: fence run asks the etcd members for their versions
// while it acquires the lease (not before: one round trip less on the way
// to the command), and still warns once about a known lease-safety bug
// (Debian's etcd 3.4.23 has etcd#15247): before anything the command
// writes when the answer is in once the lease is held (on this loopback
// server it always has been so far), else after the command, never waited
// for on the way to it. The warning is given once a day per host: a busy
// run after it (-n) is quiet, and says only why it did not run.
func TestRunVersionWarning(t *testing.T) {
	srv := etcdproc.Start(t)
	ep := srv.Endpoints()[0]
	env := st.Env(t.TempDir())
	if out := st.Output(t, env, "config", "--endpoints", ep); !strings.Contains(out, "3.4.") || strings.Contains(out, "3.4.3") {
		t.Skipf("Debian's etcd is not a 3.4 before 3.4.31: no warning expected\n%s", out)
	}
	isWarning := func(l string) bool {
		return strings.HasPrefix(l, "fence: warning: etcd "+ep+" runs 3.4.") && strings.Contains(l, "etcd#15247")
	}

	cmd := exec.Command("fence", "--endpoints", ep, "run", "vw", "--", "sh", "-c", "echo command >&2")
	cmd.Env = env
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("fence run: %v\n%s", err, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
	switch {
	case len(lines) == 2 && isWarning(lines[0]) && lines[1] == "command":
	case len(lines) == 2 && lines[0] == "command" && isWarning(lines[1]):
		t.Logf("the answer came after the lease: the warning followed the command's line")
	default:
		t.Fatalf("stderr = %q, want the warning once and the command's line", stderr.String())
	}

	st.Output(t, env, "--endpoints", ep, "acquire", "vw", "--ttl", "1m", "-q")
	code, errOut := st.Run(t, env, "--endpoints", ep, "run", "vw", "-n", "--", "true")
	lines = strings.Split(strings.TrimSpace(errOut), "\n")
	if code != 75 || len(lines) != 1 || !strings.Contains(lines[0], "vw") {
		t.Fatalf("busy run: exit %d, stderr %q; want 75 and why, without the day's warning again", code, errOut)
	}
}
