package cli

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

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

// TestVersionsAskedOnTheSide: the coordinator is open, and its work can go
// on, while the members' versions are still being asked; fence run's look
// when its lease is held does not wait for the answer, a command's end
// waits for it only until warnWait after the question began (a member that
// never answers holds nothing up for the question's whole bound), and the
// warning comes once, when the answer is in.
func TestVersionsAskedOnTheSide(t *testing.T) {
	srv := etcdtest.Start(t)
	ep := srv.Endpoints()[0]
	open := func(ask func(ctx context.Context) bool) (*Factory, *syncbuf.Buffer, func()) {
		t.Helper()
		var out, errOut syncbuf.Buffer
		f := NewFactory(Test(&out, &errOut))
		NewRootCmd(f) // defines the flags the configuration is read from
		if err := f.flags.Parse([]string{"--endpoints", ep}); err != nil {
			t.Fatal(err)
		}
		f.askVersions = func(ctx context.Context, c *etcd.Coordinator) []etcd.MemberVersion {
			if !ask(ctx) {
				return []etcd.MemberVersion{{Endpoint: ep, Err: ctx.Err()}}
			}
			return []etcd.MemberVersion{{Endpoint: ep, Version: "3.4.23"}}
		}
		c, err := f.Coordinator(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return f, &errOut, func() { c.Close() }
	}

	// The answer held back, then given.
	answer := make(chan struct{})
	var answered atomic.Bool
	f, errOut, closeC := open(func(ctx context.Context) bool {
		defer answered.Store(true)
		select {
		case <-answer:
			return true
		case <-ctx.Done(): // the question's own bound (a second)
			return false
		}
	})
	if answered.Load() {
		t.Fatal("the coordinator was returned only once the question of the members' versions had ended")
	}
	f.peekVersions(nil) // fence run, its lease held: no answer yet, no wait
	if answered.Load() || errOut.String() != "" {
		t.Fatalf("the look without waiting waited for the answer, or warned before it: answered %v, stderr %q", answered.Load(), errOut.String())
	}
	close(answer)
	f.flushVersions(nil)
	f.flushVersions(nil)
	f.peekVersions(nil)
	closeC()
	if got := errOut.String(); strings.Count(got, "fence: warning: etcd ") != 1 || !strings.Contains(got, " runs 3.4.23, ") || strings.Count(got, "\n") != 1 {
		t.Fatalf("stderr = %q, want one warning", got)
	}

	// A member that never answers (stalled): the end of the command waits
	// until warnWait, not for the question's bound, and warns nobody.
	f, errOut, closeC = open(func(ctx context.Context) bool {
		defer answered.Store(true)
		<-ctx.Done()
		return false
	})
	answered.Store(false)
	f.flushVersions(nil)
	if answered.Load() {
		t.Fatal("the end of the command waited for the whole question of a member that does not answer")
	}
	if waited := time.Since(f.askedAt); waited < warnWait {
		t.Fatalf("the end of the command waited %v for the answer, want warnWait (%v)", waited, warnWait)
	}
	closeC()
	if errOut.String() != "" {
		t.Fatalf("stderr = %q, want nothing", errOut.String())
	}
}
