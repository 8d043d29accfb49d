package etcdbugs_test

import (
	"context"
	"strings"
	"testing"

	"github.com/fence-dev/fence/internal/etcdbugs"
	"github.com/fence-dev/fence/pkg/coord/etcd"
)

// TestBugsOf: the versions with a known lease-safety bug, and those
// without.
func TestBugsOf(t *testing.T) {
	for v, want := range map[string]string{
		"3.4.23": "etcd#15247", "3.4.30": "etcd#15247", "3.5.12": "etcd#15247", "3.3.27": "etcd#15247",
		// 3.4.31-3.4.33 and 3.5.13-3.5.15: the fix without the isActive skip.
		"3.4.31": "", "3.4.33": "", "3.5.13": "", "3.5.15": "",
		"3.4.34": "etcd#15247 (residual)", "3.5.16": "etcd#15247 (residual)", "3.6.0": "etcd#15247 (residual)",
		"3.7.3": "etcd#15247 (residual)", "v3.5.9": "etcd#15247",
		"": "", "garbage": "", "2.3.8": "",
	} {
		var got []string
		for _, b := range etcdbugs.BugsOf(v) {
			got = append(got, b.Issue)
		}
		if strings.Join(got, ",") != want {
			t.Errorf("BugsOf(%q) = %v, want %q", v, got, want)
		}
	}
	// The residual has no fixed release: no warning on every command. One
	// line for the whole cluster, naming every affected member.
	w := etcdbugs.Warning([]etcd.MemberVersion{{Endpoint: "http://10.0.0.1:2379", Version: "3.4.23"}, {Endpoint: "x:1", Version: "3.4.31"},
		{Endpoint: "y:1", Version: "3.3.27"}, {Endpoint: "z:1", Version: "3.7.3"}, {Endpoint: "w:1", Version: "3.4.23"}})
	if want := "etcd 10.0.0.1:2379 and w:1 run 3.4.23, y:1 runs 3.3.27, which have a known lease-safety bug (etcd#15247, fixed in 3.4.31 and 3.5.13): "; !strings.HasPrefix(w, want) || strings.Contains(w, "\n") {
		t.Errorf("Warning = %q, want it to start %q", w, want)
	}
	w = etcdbugs.Warning([]etcd.MemberVersion{{Endpoint: "a:1", Version: "3.4.23"}})
	if want := "etcd a:1 runs 3.4.23, which has a known lease-safety bug (etcd#15247, fixed in 3.4.31): "; !strings.HasPrefix(w, want) {
		t.Errorf("Warning = %q, want it to start %q", w, want)
	}
	if w := etcdbugs.Warning([]etcd.MemberVersion{{Endpoint: "a:1", Version: "3.4.31"}, {Endpoint: "b:1", Err: context.Canceled}}); w != "" {
		t.Errorf("Warning of a fixed version = %q", w)
	}
}
