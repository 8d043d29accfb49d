//go:build linux

package supervise_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fence-dev/fence/internal/supervise"
)

// helperDir holds the small watchdog binaries the tests build (removed by
// TestMain).
var (
	helperMu   sync.Mutex
	helperDir  string
	helperBins = map[string]string{} // by protocol ("" = the real one)
)

// watchdogBinary builds cmd/fence-watchdog with the tag fence_watchdog, as
// releases build it, once per test binary; proto, when set, makes it speak
// another protocol version.
func watchdogBinary(t *testing.T, proto string) string {
	t.Helper()
	helperMu.Lock()
	defer helperMu.Unlock()
	if bin, ok := helperBins[proto]; ok {
		return bin
	}
	if helperDir == "" {
		d, err := os.MkdirTemp("", "fence-watchdog-test-")
		if err != nil {
			t.Fatal(err)
		}
		helperDir = d
	}
	bin := filepath.Join(helperDir, "p"+proto, supervise.WatchdogBinary)
	args := []string{"build", "-tags", "fence_watchdog", "-o", bin}
	if proto != "" {
		args = append(args, "-ldflags", "-X github.com/fence-dev/fence/internal/supervise.watchdogProtocol="+proto)
	}
	cmd := exec.Command("go", append(args, "github.com/fence-dev/fence/cmd/fence-watchdog")...)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	helperBins[proto] = bin
	return bin
}

// watchdogs are the two watchdogs a fault test runs with: fence itself
// (the test binary re-executed) and the small watchdog binary.
var watchdogs = []struct {
	name string
	bin  func(*testing.T) string
}{
	{"fence", func(*testing.T) string { return "" }},
	{"small", func(t *testing.T) string { return watchdogBinary(t, "") }},
}

// TestWatchdogBinary: fence runs the small watchdog binary when it says
// hello in fence's protocol, and runs as its own watchdog when the binary
// speaks another protocol or is not there; the command runs in each case.
func TestWatchdogBinary(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		bin  func(*testing.T) string
		want func(bin string) string
	}{
		{"used", func(t *testing.T) string { return watchdogBinary(t, "") }, func(bin string) string { return bin }},
		{"other protocol", func(t *testing.T) string { return watchdogBinary(t, "0") }, func(string) string { return self }},
		{"missing", func(t *testing.T) string { return filepath.Join(t.TempDir(), supervise.WatchdogBinary) }, func(string) string { return self }},
	}
	for _, bk := range backends {
		t.Run(bk.name, func(t *testing.T) {
			b := bk.open(t)
			for _, tc := range cases {
				t.Run(tc.name, func(t *testing.T) {
					bin := tc.bin(t)
					out := filepath.Join(t.TempDir(), "parent")
					code, err := run(t, b, supervise.Options{Lock: "wd", TTL: 5 * time.Second, Watchdog: bin, Shell: true,
						Command: []string{`readlink /proc/$PPID/exe > "$OUT"`}, Env: append(os.Environ(), "OUT="+out)})
					if code != 0 || err != nil {
						t.Fatalf("run: %d, %v", code, err)
					}
					got, err := os.ReadFile(out)
					if err != nil {
						t.Fatal(err)
					}
					if want := tc.want(bin); strings.TrimSpace(string(got)) != want {
						t.Fatalf("the command's parent (the watchdog) is %s, want %s", strings.TrimSpace(string(got)), want)
					}
					t.Logf("watchdog: %s", strings.TrimSpace(string(got)))
				})
			}
		})
	}
}
