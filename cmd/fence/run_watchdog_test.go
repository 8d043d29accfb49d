package main

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	st "github.com/fence-dev/fence/cmd/fence/internal/scripttest"
)

// TestRunStartsWatchdogFirst: `fence run` starts its watchdog before it
// opens the coordinator, so that the watchdog's start-up overlaps the
// connection; when the connection fails, fence exits 125 with one line and
// the watchdog is gone with it. The coordinator is a loopback listener that
// accepts connections and never answers: while fence waits for it, its
// watchdog must already run.
func TestRunStartsWatchdogFirst(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	connected := make(chan struct{})
	go func() { // accept, never answer; close all at the end
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if conns = append(conns, c); len(conns) == 1 {
				close(connected)
			}
		}
	}()
	defer ln.Close()

	dir := t.TempDir()
	ran := filepath.Join(dir, "ran")
	cmd := exec.Command("fence", "--endpoints", ln.Addr().String(), "--dial-timeout", "3s", "run", "L", "--", "touch", ran)
	cmd.Env = st.Env(dir)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})

	// fence connects: its watchdog must run while the connection hangs
	// (fence cannot get further without an answer).
	select {
	case <-connected:
	case <-time.After(st.HangGuard):
		t.Fatal("fence never connected")
	}
	wd := findWatchdog(t, cmd.Process.Pid)
	pidfd, err := unix.PidfdOpen(wd, 0)
	if err != nil {
		t.Fatalf("pidfd_open(%d): %v", wd, err)
	}
	defer unix.Close(pidfd)
	if exited(t, cmd.Process.Pid) {
		t.Fatal("fence gave up on the connection before its watchdog was seen; raise --dial-timeout")
	}

	if code := st.ExitCode(t, cmd); code != 125 || !st.OneErrorLine.MatchString(stderr.String()) {
		t.Fatalf("exit %d, stderr %q; want 125 and one line", code, stderr.String())
	}
	// The watchdog has exited (pidfd readable), not been left behind.
	fds := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}
	if n, err := unix.Poll(fds, 0); n != 1 || err != nil {
		t.Fatalf("the watchdog %d outlived fence: poll %d, %v", wd, n, err)
	}
	if _, err := os.Stat(ran); err == nil {
		t.Fatal("the command ran without a coordinator")
	}
}

// findWatchdog waits for fence's child running as its watchdog and returns
// its PID.
func findWatchdog(t *testing.T, fence int) int {
	t.Helper()
	deadline := time.Now().Add(st.HangGuard)
	for time.Now().Before(deadline) {
		if exited(t, fence) {
			t.Fatalf("fence %d exited and no watchdog of it was seen", fence)
		}
		tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", fence))
		for _, f := range tasks {
			b, _ := os.ReadFile(f)
			for _, field := range strings.Fields(string(b)) {
				pid, _ := strconv.Atoi(field)
				args, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
				if strings.Contains(string(args), "\x00__watchdog") {
					return pid
				}
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("fence %d has no watchdog", fence)
	return 0
}

// exited reports whether the process pid (a child of this process, not yet
// waited for) has ended: it is a zombie or gone.
func exited(t *testing.T, pid int) bool {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	s := string(b)
	return strings.Contains(s[strings.LastIndexByte(s, ')'):], ") Z ")
}
