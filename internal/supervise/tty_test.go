//go:build linux

package supervise_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fence-dev/fence/internal/supervise"
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
