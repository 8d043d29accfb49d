package cli

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// TestWarnDuePrunes: a warning printed writes its marker and removes the
// markers of texts not printed for warnForget and the single marker file
// of older fences; a recent marker of another text stays, and the same
// text is quiet until warnEvery has passed.
func TestWarnDuePrunes(t *testing.T) {
	cache := t.TempDir()
	t.Setenv("XDG_CACHE_HOME", cache)
	dir := filepath.Join(cache, "fence")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for name, age := range map[string]time.Duration{
		"warned":        time.Hour,
		"warned-stale":  warnForget + time.Hour,
		"warned-recent": warnForget - 2*warnEvery,
	} {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, now.Add(-age), now.Add(-age)); err != nil {
			t.Fatal(err)
		}
	}
	if !warnDue("etcd says hello", now) {
		t.Fatal("a first warning is not due")
	}
	if warnDue("etcd says hello", now.Add(time.Hour)) {
		t.Error("the same warning is due again within warnEvery")
	}
	if !warnDue("etcd says hello", now.Add(warnEvery+time.Minute)) {
		t.Error("the same warning is not due after warnEvery")
	}
	left, _ := filepath.Glob(filepath.Join(dir, "warned*"))
	for i, p := range left {
		left[i] = filepath.Base(p)
	}
	if len(left) != 2 || !slices.Contains(left, "warned-recent") {
		t.Errorf("markers left: %v, want warned-recent and the new one", left)
	}
}
