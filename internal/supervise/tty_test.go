//go:build linux

package supervise_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fence-dev/fence/internal/clock"
	"github.com/fence-dev/fence/internal/supervise"
	"github.com/fence-dev/fence/pkg/coord"
)

// openPTY opens a pseudo-terminal pair.
func openPTY(t *testing.T) (master, slave *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals: %v", err)
	}
	if err := unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(int(m.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	s, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close(); s.Close() })
	return m, s
}

// TestTerminal: fence runs in the foreground of a terminal (a session of its
// own on a pseudo-terminal). The command gets the terminal's foreground: it
// can read it (in a background group it would be stopped by SIGTTIN), and
// ^C reaches it directly, as it would without fence.
func TestTerminal(t *testing.T) {
	b := localBackend(t)
	for _, tc := range []struct {
		name  string
		input string
		want  string
		code  int
	}{
		{"read", "hello\n", "got:hello", 0},
		{"interrupt", "\x03", "", 128 + 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			master, slave := openPTY(t)
			o := supervise.Options{Lock: "tty", TTL: 3 * time.Second, Location: b.location(), Shell: true,
				Command: []string{`stty -echo; echo ready; read line; echo "got:$line"`}}
			cfg, _ := json.Marshal(fenceConfig{StateDir: b.stateDir, Opts: o})
			cmd := exec.Command(os.Args[0])
			cmd.Env = append(os.Environ(), fenceEnv+"="+string(cfg))
			cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
			cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			slave.Close()
			done := make(chan int, 1)
			go func() { cmd.Wait(); done <- cmd.ProcessState.ExitCode() }()
			defer func() { cmd.Process.Kill(); <-done }()

			lines := make(chan string, 16)
			go func() {
				sc := bufio.NewScanner(master)
				for sc.Scan() {
					lines <- strings.TrimSpace(sc.Text())
				}
				close(lines)
			}()
			expect := func(want string) {
				t.Helper()
				timeout := time.After(hang)
				for {
					select {
					case l, ok := <-lines:
						if !ok {
							t.Fatalf("terminal closed before %q", want)
						}
						if l == want {
							return
						}
					case <-timeout:
						t.Fatalf("no %q on the terminal", want)
					}
				}
			}
			expect("ready")
			if _, err := master.Write([]byte(tc.input)); err != nil {
				t.Fatal(err)
			}
			if tc.want != "" {
				expect(tc.want)
			}
			select {
			case code := <-done:
				done <- code
				if code != tc.code {
					t.Fatalf("fence exited %d, want %d", code, tc.code)
				}
			case <-time.After(hang):
				t.Fatal("fence did not exit: was the command stopped by SIGTTIN?")
			}
		})
	}
}

// TestShellJobStopped: fence run is a job of an interactive bash on a
// terminal, its command in the terminal's foreground. The job is stopped
// with kill -STOP -PGID (fence's process group, as the shell made it): the
// watchdog, in a group of its own, is not stopped with it, and kills the
// command's whole tree before the lease can expire; a next holder gets the
// lock only after that. bash takes the terminal back and keeps it (the
// watchdog does not hand it to the stopped job); `fg` resumes fence, which
// exits 76.
func TestShellJobStopped(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	b := localBackend(t)
	list := tempPath(t, "pids")
	o := supervise.Options{Lock: "job", TTL: 3 * time.Second, Grace: 300 * time.Millisecond, Location: b.location(),
		Shell: true, Command: []string{treeScript}, Env: append(os.Environ(), "P="+list)}
	cfg, _ := json.Marshal(fenceConfig{StateDir: b.stateDir, Opts: o})
	master, slave := openPTY(t)
	cmd := exec.Command(bash, "--norc", "--noprofile", "-i")
	cmd.Env = append(os.Environ(), fenceEnv+"="+string(cfg), "FENCE_BIN="+os.Args[0], "PS1=$ ", "TERM=dumb")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	slave.Close()
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	defer func() { cmd.Process.Kill(); <-done }()
	lines := make(chan string, 64)
	go func() {
		sc := bufio.NewScanner(master)
		for sc.Scan() {
			lines <- strings.TrimSpace(sc.Text())
		}
		close(lines)
	}()
	var seen []string
	expect := func(want string) {
		t.Helper()
		timeout := time.After(hang)
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("terminal closed before %q", want)
				}
				seen = append(seen, l)
				if strings.Contains(l, want) {
					return
				}
			case <-timeout:
				t.Fatalf("no %q on the terminal:\n%s", want, strings.Join(seen, "\n"))
			}
		}
	}
	if _, err := master.Write([]byte(`"$FENCE_BIN"` + "\n")); err != nil {
		t.Fatal(err)
	}
	ps := pids(t, waitFile(t, list, treeLines))
	leader, err := procStat(ps[0])
	if err != nil {
		t.Fatal(err)
	}
	wd, err := procStat(leader.PPID)
	if err != nil {
		t.Fatal(err)
	}
	fence, err := procStat(wd.PPID)
	if err != nil {
		t.Fatal(err)
	}
	if fence.PPID != cmd.Process.Pid || fence.PGID == cmd.Process.Pid {
		t.Fatalf("fence %+v is not a job of bash %d", fence, cmd.Process.Pid)
	}
	if fg, err := unix.IoctlGetInt(int(master.Fd()), unix.TIOCGPGRP); err != nil || fg != leader.PGID {
		t.Fatalf("the terminal's foreground is %d (%v), not the command's group %d", fg, err, leader.PGID)
	}
	var deaths []*deathWatch
	for _, pid := range ps {
		deaths = append(deaths, watchDeath(t, pid))
	}

	if err := syscall.Kill(-fence.PGID, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer syscall.Kill(-fence.PGID, syscall.SIGCONT)
	expect("Stopped")
	ctx := context.Background()
	l, err := b.c.Acquire(ctx, "job", coord.AcquireOptions{TTL: 3 * time.Second, Wait: hang, Holder: "next"})
	if err != nil {
		t.Fatal(err)
	}
	got := clock.Now()
	assertAllDead(t, ps)
	var last clock.Boot
	for _, d := range deaths {
		last = max(last, d.wait(t))
	}
	if last >= got {
		t.Fatalf("the stopped job's command died %v after the next holder got the lock", last.Sub(got))
	}
	if err := b.c.Release(ctx, l.Name, l.ID); err != nil {
		t.Fatal(err)
	}
	if fg, err := unix.IoctlGetInt(int(master.Fd()), unix.TIOCGPGRP); err != nil || fg != cmd.Process.Pid {
		t.Fatalf("the terminal's foreground is %d (%v), not bash's %d", fg, err, cmd.Process.Pid)
	}
	if _, err := master.Write([]byte(`fg; echo "fence exited $?"` + "\n")); err != nil {
		t.Fatal(err)
	}
	expect(`fence: lease on "job" (token 1) is no longer safe`)
	expect("fence exited 76")
}
