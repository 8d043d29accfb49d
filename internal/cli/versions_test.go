package cli

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fence-dev/fence/internal/etcdproc"
	"github.com/fence-dev/fence/internal/etcdtest"
	"github.com/fence-dev/fence/internal/syncbuf"
	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/coord/etcd"
)

// TestMain keeps the package's tests off the user's cache directory,
// where the coordinator warnings are remembered (warnDue).
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "fence-cli-cache-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	os.Setenv("XDG_CACHE_HOME", dir)
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// TestVersionWarning: against a three-member cluster of Debian's etcd
// (3.4.23, which has etcd#15247) a command warns in one line naming every
// member, its version, the bug and the fixed version, once a day on this
// host (a second command is quiet), never under -q or --log-level error,
// and a failure to remember it fails nothing; fence config, fence status
// and fence show name the bug every time.
func TestVersionWarning(t *testing.T) {
	cl := etcdproc.StartCluster(t, etcdproc.ClusterOptions{})
	eps := cl.Endpoints()
	all := strings.Join(eps, ",")
	cache := func() string {
		dir := t.TempDir()
		t.Setenv("XDG_CACHE_HOME", dir)
		return dir
	}
	dir := cache()
	_, out, errOut := run("config", "--endpoints", all)
	if !strings.Contains(out, "=3.4.") || strings.Contains(out, "=3.4.3") {
		t.Skipf("Debian's etcd is not a 3.4 before 3.4.31 (%s): no warning expected", out)
	}
	if strings.Count(errOut, "fence: warning: etcd ") != 1 {
		t.Errorf("fence config: stderr %q, want the warning", errOut)
	}
	if m, _ := filepath.Glob(dir + "/fence/warned-*"); len(m) != 0 {
		t.Error("fence config counted as the day's warning")
	}
	for _, ep := range eps {
		if !strings.Contains(out, ep+"=3.4.") || !strings.Contains(out, "(lease-safety bug etcd#15247)") {
			t.Fatalf("fence config's server-versions row does not name %s and the bug:\n%s", ep, out)
		}
	}

	code, _, errOut := run("status", "vw", "--endpoints", all)
	if code != 1 {
		t.Fatalf("status exit %d: %s", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(errOut), "\n")
	if len(lines) != 1 || !strings.HasPrefix(lines[0], "fence: warning: etcd ") ||
		!strings.Contains(lines[0], "etcd#15247, fixed in 3.4.31") {
		t.Fatalf("stderr = %q, want one warning about etcd#15247", errOut)
	}
	for _, ep := range eps {
		if !strings.Contains(lines[0], ep) {
			t.Errorf("the warning does not name the member %s: %q", ep, lines[0])
		}
	}
	marker, _ := filepath.Glob(dir + "/fence/warned-*")
	if len(marker) != 1 {
		t.Fatalf("markers of the day's warning: %q, want one", marker)
	}
	for _, p := range []string{dir + "/fence", marker[0]} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if want := map[bool]os.FileMode{true: 0o700, false: 0o600}[fi.IsDir()]; fi.Mode().Perm() != want {
			t.Errorf("%s: mode %v, want %v", p, fi.Mode().Perm(), want)
		}
	}
	// The same day: quiet; status and show still say it, config too.
	if _, _, errOut := run("config", "--endpoints", all); strings.Count(errOut, "fence: warning: etcd ") != 1 {
		t.Errorf("fence config after the day's warning: stderr %q, want the warning", errOut)
	}
	code, out, errOut = run("status", "vw", "--endpoints", all)
	if code != 1 || errOut != "" {
		t.Fatalf("second status: exit %d, stderr %q; want 1 and nothing (warned today already)", code, errOut)
	}
	if !strings.Contains(out, "coordinator_warning") || !strings.Contains(out, "lease bug etcd#15247 in etcd 3.4.") {
		t.Errorf("fence status does not name the bug:\n%s", out)
	}
	_, out, _ = run("status", "vw", "--endpoints", all, "-o", "json")
	if !strings.Contains(out, `"coordinator_warning": "lease bug etcd#15247 in etcd 3.4.`) {
		t.Errorf("fence status -o json does not name the bug:\n%s", out)
	}
	_, out, _ = run("show", "vw", "--endpoints", all)
	if !strings.Contains(out, "coordinator_warning") {
		t.Errorf("fence show does not name the bug:\n%s", out)
	}
	// A day later: once more.
	old := time.Now().Add(-warnEvery - time.Minute)
	if err := os.Chtimes(marker[0], old, old); err != nil {
		t.Fatal(err)
	}
	if _, _, errOut = run("status", "vw", "--endpoints", all); strings.Count(errOut, "fence: warning: ") != 1 {
		t.Errorf("a day later: stderr = %q, want the warning again", errOut)
	}

	// -q and --log-level error: nothing, on a host that was not warned.
	for _, flag := range []string{"-q", "--log-level=error"} {
		cache()
		if code, _, errOut := run("status", "vw", "--endpoints", all, flag); code != 1 || errOut != "" {
			t.Errorf("status %s: exit %d, stderr %q; want 1 and nothing", flag, code, errOut)
		}
	}
	// No cache to remember it in: the warning, every time, and the
	// command's own outcome.
	t.Setenv("XDG_CACHE_HOME", "/dev/null/x")
	for range 2 {
		if code, _, errOut := run("status", "vw", "--endpoints", all); code != 1 || strings.Count(errOut, "fence: warning: ") != 1 {
			t.Errorf("status without a cache: exit %d, stderr %q", code, errOut)
		}
	}
}

// TestVersionsAskedOnTheSide: the coordinator is open, and its work can go
// on, while the members' versions are still being asked; fence run's look
// when its lease is held does not wait for the answer, a command's end
// waits for it only until warnWait after the question began (a member that
// never answers holds nothing up for the question's whole bound), and the
// warning comes once, when the answer is in.
func TestVersionsAskedOnTheSide(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
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
		// The question is asked once per process: of this member, which
		// holds its answer back, not of the coordinator's.
		f.versions.ask(context.Background(), heldAnswer{answer: func(ctx context.Context) []etcd.MemberVersion {
			if !ask(ctx) {
				return []etcd.MemberVersion{{Endpoint: ep, Err: ctx.Err()}}
			}
			return []etcd.MemberVersion{{Endpoint: ep, Version: "3.4.23"}}
		}}, time.Second)
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
	if waited := time.Since(f.versions.askedAt); waited < warnWait {
		t.Fatalf("the end of the command waited %v for the answer, want warnWait (%v)", waited, warnWait)
	}
	closeC()
	if errOut.String() != "" {
		t.Fatalf("stderr = %q, want nothing", errOut.String())
	}
}

// heldAnswer is an etcd coordinator's question of its members' versions
// (versionAsker), answered by answer.
type heldAnswer struct {
	coord.Coordinator
	answer func(context.Context) []etcd.MemberVersion
}

func (h heldAnswer) ServerVersions(ctx context.Context) []etcd.MemberVersion { return h.answer(ctx) }
