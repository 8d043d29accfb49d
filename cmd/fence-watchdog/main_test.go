package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestSmall: built with the tag fence_watchdog, the watchdog links none of
// what fence run needs only in fence itself (the coordinators, etcd's
// client and gRPC, protobuf, Prometheus, the history): that is what makes
// it start fast. A file of internal/supervise that is not the watchdog's
// and lacks `//go:build !fence_watchdog` pulls them in again.
func TestSmall(t *testing.T) {
	out, err := exec.Command("go", "list", "-tags", "fence_watchdog", "-deps", "github.com/fence-dev/fence/cmd/fence-watchdog").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	var bad []string
	for _, p := range strings.Fields(string(out)) {
		for _, heavy := range []string{"go.etcd.io/", "google.golang.org/", "github.com/prometheus/", "/pkg/coord", "/pkg/history", "/pkg/fencing"} {
			if strings.Contains(p, heavy) {
				bad = append(bad, p)
			}
		}
	}
	if len(bad) > 0 {
		t.Fatalf("the small watchdog links %s", strings.Join(bad, ", "))
	}
}
