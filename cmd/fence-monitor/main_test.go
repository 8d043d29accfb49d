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

	"github.com/fence-dev/fence/internal/release"
)

// TestFenceLeavesMonitorOut: the fence binary links neither the dashboard
// nor the exporter (Bubble Tea and the rest of charmbracelet's packages,
// client_golang's registry), nor tablewriter: their initialisation is what
// every start of fence would pay. A command of
// internal/cli that imports them, or a package of fence run's path that
// uses client_golang, fails it.
func TestFenceLeavesMonitorOut(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/fence-dev/fence/cmd/fence").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	var bad []string
	for _, p := range strings.Fields(string(out)) {
		for _, heavy := range []string{"github.com/charmbracelet/", "github.com/atotto/clipboard", "github.com/olekukonko/",
			"github.com/prometheus/client_golang", "github.com/prometheus/procfs", "/internal/exporter", "/internal/monitor", "github.com/fence-dev/fence/tui"} {
			if strings.Contains(p, heavy) {
				bad = append(bad, p)
			}
		}
	}
	if len(bad) > 0 {
		t.Fatalf("fence links %s", strings.Join(bad, ", "))
	}
}

// build builds fence and fence-monitor into one directory and returns it.
func build(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for bin, pkg := range map[string]string{"fence": "cmd/fence", "fence-monitor": "cmd/fence-monitor"} {
		cmd := exec.Command("go", "build", "-tags", release.Tags, "-o", filepath.Join(dir, bin), "github.com/fence-dev/fence/"+pkg)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", pkg, err, out)
		}
	}
	return dir
}

func env(t *testing.T) []string {
	var e []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "FENCE_") {
			e = append(e, kv)
		}
	}
	return append(e, "XDG_CONFIG_HOME="+t.TempDir(), "FENCE_STATE_DIR="+t.TempDir())
}

// TestExporterRunsFenceMonitor: `fence exporter` of the fence binary becomes
// fence-monitor (the same process, exec'd with the same arguments), which
// serves the metrics and ends on SIGTERM with exit 0. Without fence-monitor
// beside it, fence says so, exit 125; through a symlink, fence finds the
// fence-monitor beside its own binary; a fence-monitor of another build
// refuses to stand in for fence.
func TestExporterRunsFenceMonitor(t *testing.T) {
	dir := build(t)
	cmd := exec.Command(filepath.Join(dir, "fence"), "--verbose", "exporter", "--listen", "127.0.0.1:0")
	cmd.Env = env(t)
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
	case <-time.After(20 * time.Second):
		t.Fatal("fence exporter never said where it serves")
	}
	exe, err := os.Readlink("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/exe")
	if err != nil || filepath.Base(exe) != "fence-monitor" {
		t.Errorf("fence exporter runs as %q (%v), want fence-monitor", exe, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
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

	// fence alone: no fence-monitor beside it.
	alone := t.TempDir()
	self, err := os.ReadFile(filepath.Join(dir, "fence"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(alone, "fence"), self, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"exporter"}, {"top"}} {
		c := exec.Command(filepath.Join(alone, "fence"), args...)
		c.Env = env(t)
		out, err := c.CombinedOutput()
		if code := exitCode(err); code != 125 || !strings.Contains(string(out), "needs fence-monitor, installed beside fence") {
			t.Errorf("fence %s alone: exit %d, %q", args[0], code, out)
		}
	}

	// fence called through a symlink elsewhere (/usr/local/bin/fence ->
	// the release's directory): fence-monitor is found beside the binary
	// itself. Its exporter then fails on the address, not for want of it.
	link := filepath.Join(t.TempDir(), "fence")
	if err := os.Symlink(filepath.Join(dir, "fence"), link); err != nil {
		t.Fatal(err)
	}
	c := exec.Command(link, "exporter", "--listen", "256.0.0.1:1")
	c.Env = env(t)
	out, err := c.CombinedOutput()
	if strings.Contains(string(out), "needs fence-monitor") || !strings.Contains(string(out), "exporter:") || exitCode(err) == 0 {
		t.Errorf("fence exporter through a symlink: exit %d, %q; want fence-monitor's own error about the address", exitCode(err), out)
	}

	// A fence-monitor of another build.
	c = exec.Command(filepath.Join(dir, "fence-monitor"), "exporter", "--listen", "127.0.0.1:0")
	c.Env = append(env(t), "FENCE_MONITOR_OF=v0.0.1 0123456789ab")
	out, err = c.CombinedOutput()
	if code := exitCode(err); code != 125 || !strings.Contains(string(out), "install both from the same release") {
		t.Errorf("fence-monitor for another build: exit %d, %q", code, out)
	}
}

func exitCode(err error) int {
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}
