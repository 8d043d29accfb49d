package main

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	st "github.com/fence-dev/fence/cmd/fence/internal/scripttest"
)

// TestOneBinary: `go build ./cmd/fence`, without tags and alone in its
// directory, is the whole program: `fence exporter` serves /metrics in
// fence's own process and ends on SIGTERM with exit 0, and the watchdog of
// `fence run` (the command's parent) is that same binary. (fence top, the
// other command that once needed a second binary, is tested in tmux:
// test/tmux.)
func TestOneBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds fence")
	}
	dir := t.TempDir()
	fence := filepath.Join(dir, "fence")
	if out, err := exec.Command("go", "build", "-o", fence, "github.com/fence-dev/fence/cmd/fence").CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/fence: %v\n%s", err, out)
	}
	env := st.Env(t.TempDir())

	t.Run("exporter", func(t *testing.T) {
		cmd := exec.Command(fence, "--verbose", "exporter", "--listen", "127.0.0.1:0")
		cmd.Env = env
		stderr, err := cmd.StderrPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer cmd.Process.Kill()
		addr := make(chan string, 1)
		go func() {
			re := regexp.MustCompile(`http://([^/ ]+)/metrics`)
			sc := bufio.NewScanner(stderr)
			for sc.Scan() {
				t.Logf("fence: %s", sc.Text())
				if m := re.FindStringSubmatch(sc.Text()); m != nil {
					addr <- m[1]
				}
			}
		}()
		var a string
		select {
		case a = <-addr:
		case <-time.After(st.HangGuard):
			t.Fatal("fence exporter never said where it serves")
		}
		if exe, err := os.Readlink("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/exe"); err != nil || exe != fence {
			t.Errorf("fence exporter runs as %q (%v), want %s", exe, err, fence)
		}
		ctx, cancel := context.WithTimeout(context.Background(), st.HangGuard)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+a+"/metrics", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		for _, want := range []string{"fence_exporter_coordinator_up 1", "go_goroutines", "process_resident_memory_bytes"} {
			if !strings.Contains(string(body), want) {
				t.Errorf("/metrics has no %q:\n%s", want, body)
			}
		}
		_ = cmd.Process.Signal(syscall.SIGTERM)
		if err := cmd.Wait(); err != nil {
			t.Errorf("fence exporter ended with %v after SIGTERM, want exit 0", err)
		}
	})

	t.Run("watchdog", func(t *testing.T) {
		cmd := exec.Command(fence, "run", "one", "--", "sh", "-c", `readlink /proc/$PPID/exe; tr '\0' ' ' < /proc/$PPID/cmdline`)
		cmd.Env = env
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("fence run: %v", err)
		}
		got := strings.Fields(string(out))
		if len(got) != 3 || got[0] != fence || got[2] != "__watchdog" {
			t.Fatalf("the command's parent is %q, want %s running as fence's watchdog", out, fence)
		}
	})
}
