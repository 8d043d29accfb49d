//go:build linux

package supervise_test

import (
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/fence-dev/fence/internal/clock"
)

// TestWatchdogResumedTakesExtensions: the watchdog alone is frozen (SIGSTOP) for three TTLs
// while fence keeps renewing and sends it extensions far past the stop time
// it had when it froze. Resumed, it takes every extension waiting in its
// order pipe before it judges its stop time: the healthy command runs on,
// and ends on its own with fence's exit 0.
//
// The converse: fence is frozen too, so no extension comes. Resumed past
// the stop time, the watchdog stops the command at once (exit 76 once fence
// is resumed as well).
func TestWatchdogResumedTakesExtensions(t *testing.T) {
	const ttl = 2 * time.Second // renewals every 667ms, stop time 1.4s after the last acknowledged one
	for _, bk := range backends {
		t.Run(bk.name, func(t *testing.T) {
			b := bk.open(t)
			for _, fenceToo := range []bool{false, true} {
				name := "alone"
				if fenceToo {
					name = "with-fence"
				}
				t.Run(name, func(t *testing.T) {
					f, pid, watchdog, goFile := startUntilGo(t, b, "frozen-watchdog-"+name, ttl)
					death := watchDeath(t, pid)
					time.Sleep(ttl / 2) // a renewal

					if fenceToo {
						if err := f.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
							t.Fatal(err)
						}
					}
					if err := syscall.Kill(watchdog, syscall.SIGSTOP); err != nil {
						t.Fatal(err)
					}
					defer syscall.Kill(watchdog, syscall.SIGCONT)
					time.Sleep(3 * ttl)
					if !alive(pid) {
						t.Fatal("the command died while its watchdog was frozen")
					}
					if err := syscall.Kill(watchdog, syscall.SIGCONT); err != nil {
						t.Fatal(err)
					}
					resumed := clock.Now()

					if fenceToo {
						died := death.wait(t)
						t.Logf("the command was dead %v after its watchdog was resumed past its stop time", died.Sub(resumed).Round(time.Millisecond))
						if died.Sub(resumed) > time.Second {
							t.Fatalf("the command died %v after its watchdog was resumed past its stop time", died.Sub(resumed))
						}
						if err := f.cmd.Process.Signal(syscall.SIGCONT); err != nil {
							t.Fatal(err)
						}
						f.expectLost(t, "paused")
						return
					}
					// The watchdog's first rounds after its resume: recheck
					// is 100ms, and a stop would be seen at once.
					select {
					case at := <-death.died:
						t.Fatalf("the watchdog stopped a healthy command %v after it was resumed; fence: %s",
							at.Sub(resumed).Round(time.Millisecond), f.stderr.String())
					case <-time.After(ttl / 2):
					}
					if err := os.WriteFile(goFile, nil, 0o600); err != nil {
						t.Fatal(err)
					}
					if code := f.wait(t); code != 0 || f.stderr.Len() != 0 {
						t.Fatalf("fence exited %d, want 0; stderr:\n%s", code, f.stderr.String())
					}
				})
			}
		})
	}
}
