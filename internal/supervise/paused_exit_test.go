//go:build linux

package supervise_test

import (
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/fence-dev/fence/internal/supervise"
)

// TestCommandEndsWhileFenceFrozen: fence and its watchdog are both frozen
// past the lease's safe-until, so nothing can stop the command, which ends on
// its own (exit 0) after the lease could no longer be trusted. Its work was
// not covered by the lease to the end: once resumed, fence exits 76 and says
// how the command ended, whichever it notices first, the command's exit
// report or the lapsed lease.
//
// The watchdog is frozen wherever the test's SIGSTOP finds it, or (a fault
// it injects in itself) between its look for the command's exit, which
// found it running, and its judging of the stop time: resumed past that
// time, it must look again rather than report a stop of a command that had
// already ended (CI once caught the SIGSTOP there, with "the command was
// stopped (SIGTERM)").
func TestCommandEndsWhileFenceFrozen(t *testing.T) {
	for _, bk := range backends {
		t.Run(bk.name, func(t *testing.T) {
			b := bk.open(t)
			for _, afterLook := range []bool{false, true} {
				name := "anywhere"
				if afterLook {
					name = "after-look"
				}
				t.Run(name, func(t *testing.T) {
					if afterLook {
						t.Setenv("FENCE_TEST_WATCHDOG_FREEZE_AFTER_LOOK", "1")
					}
					const ttl = 2 * time.Second
					f, pid, watchdog, goFile := startUntilGo(t, b, "frozen-both-"+name, ttl)
					if afterLook {
						waitState(t, watchdog, func(s byte) bool { return s == 'T' }, "stopped by itself")
					}
					if err := f.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
						t.Fatal(err)
					}
					if err := syscall.Kill(watchdog, syscall.SIGSTOP); err != nil {
						t.Fatal(err)
					}
					defer syscall.Kill(watchdog, syscall.SIGCONT)
					time.Sleep(2 * ttl) // past safe-until: nobody renews, nobody stops the command

					// The command ends on its own; the frozen watchdog, its parent,
					// leaves it a zombie until it is resumed and reaps it.
					if err := os.WriteFile(goFile, nil, 0o600); err != nil {
						t.Fatal(err)
					}
					waitState(t, pid, func(s byte) bool { return s == 'Z' }, "a zombie")
					if err := syscall.Kill(watchdog, syscall.SIGCONT); err != nil {
						t.Fatal(err)
					}
					waitState(t, pid, nil, "reaped")
					if err := f.cmd.Process.Signal(syscall.SIGCONT); err != nil {
						t.Fatal(err)
					}
					// 76, not the command's 0: it ended after the lease lapsed.
					f.expectLost(t, "exited with code 0 after that")
				})
			}
		})
	}
}

// startUntilGo starts fence run on lock with a command that runs until the
// file goFile appears, then exits 0; it returns fence, the command's PID and
// its watchdog's.
func startUntilGo(t *testing.T, b *backend, lock string, ttl time.Duration) (f *fenceProc, pid, watchdog int, goFile string) {
	t.Helper()
	dir := t.TempDir()
	pidFile, goFile := dir+"/pid", dir+"/go"
	f = startFence(t, b, supervise.Options{Lock: lock, TTL: ttl, Shell: true,
		Command: []string{"echo $$ > " + shell(pidFile) + "; while [ ! -e " + shell(goFile) + " ]; do sleep 0.02; done; exit 0"}})
	pid = pids(t, waitFile(t, pidFile, 1))[0]
	st, err := procStat(pid)
	if err != nil {
		t.Fatal(err)
	}
	return f, pid, st.PPID, goFile
}

// waitState waits until pid's state satisfies ok, or (ok nil) until pid is
// gone.
func waitState(t *testing.T, pid int, ok func(byte) bool, what string) {
	t.Helper()
	for end := time.Now().Add(hang); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		st, err := procStat(pid)
		if ok == nil && (err != nil || st.Gone()) {
			return
		}
		if ok != nil && err == nil && ok(st.State) {
			return
		}
	}
	t.Fatalf("process %d never became %s", pid, what)
}
