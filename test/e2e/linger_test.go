package e2e

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fence-dev/fence/internal/clock"
	"github.com/fence-dev/fence/internal/etcdtest"
	"github.com/fence-dev/fence/internal/faultproxy"
)

// TestExitSoonAfterStop: the coordinator stops answering while `fence run`
// holds its lease: every packet between fence and etcd is dropped (a fault
// proxy blackholes both directions), or the etcd server is stopped. fence
// stops its command before the lease can expire and then exits 76 within
// about a second of the command's death: the release and the history
// records that follow the stop (lease_lost, the renewal failures) do not
// wait for a coordinator that does not answer.
func TestExitSoonAfterStop(t *testing.T) {
	const bound = 1500 * time.Millisecond // "within about a second", with room for a loaded machine
	for _, fault := range []string{"blackhole", "etcd-stopped"} {
		t.Run(fault, func(t *testing.T) {
			srv := etcdtest.Start(t)
			target := strings.TrimPrefix(srv.Endpoints()[0], "http://")
			p, err := faultproxy.New(target)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { p.Close() })
			dir := t.TempDir()
			pidFile := filepath.Join(dir, "pid")
			env := cleanEnv(t, "FENCE_ENDPOINTS="+p.Addr(), "FENCE_PREFIX=/e2e/")
			f := startFence(t, env, "run", "linger", "--ttl", "3s", "--", "sh", "-c", `echo $$ > "$0"; exec sleep 600`, pidFile)
			pid := waitPID(t, pidFile)
			pfd, err := unix.PidfdOpen(pid, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer unix.Close(pfd)
			time.Sleep(1500 * time.Millisecond) // a renewal or two

			switch fault {
			case "blackhole":
				p.SetMode(faultproxy.BlackholeBoth)
			case "etcd-stopped":
				srv.Stop()
			}
			faultAt := clock.Now()
			fds := []unix.PollFd{{Fd: int32(pfd), Events: unix.POLLIN}}
			for {
				n, err := unix.Poll(fds, int(hangGuard/time.Millisecond))
				if errors.Is(err, unix.EINTR) {
					continue
				}
				if n != 1 || err != nil {
					t.Fatalf("the command did not die: %d, %v", n, err)
				}
				break
			}
			died := clock.Now()
			select {
			case <-f.done:
			case <-time.After(hangGuard):
				f.kill()
				t.Fatalf("fence did not exit; output:\n%s", f.stderr)
			}
			exited := clock.Now()
			out := f.stderr.String()
			t.Logf("%s: command dead %v after the fault; fence exited %v after it (%d); output:\n%s", fault,
				died.Sub(faultAt).Round(time.Millisecond), exited.Sub(died).Round(time.Millisecond), f.code, out)
			if f.code != 76 {
				t.Fatalf("fence exited %d, want 76", f.code)
			}
			if !strings.Contains(out, "the command was stopped") {
				t.Fatalf("fence did not say it stopped the command:\n%s", out)
			}
			if d := exited.Sub(died); d > bound {
				t.Fatalf("fence exited %v after its command's death, want within about a second", d.Round(time.Millisecond))
			}
		})
	}
}

// waitPID waits for a file holding a PID and returns it.
func waitPID(t *testing.T, path string) int {
	t.Helper()
	for end := time.Now().Add(hangGuard); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		b, err := os.ReadFile(path)
		if err != nil || !strings.HasSuffix(string(b), "\n") {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			t.Fatalf("%s: %q", path, b)
		}
		return pid
	}
	t.Fatalf("no PID in %s", path)
	return 0
}
