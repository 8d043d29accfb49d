package cli

import (
	"os"
	"path/filepath"
	"sort"
	"testing"
)

// TestGeneratedDocsAreCurrent fails when docs/cli, docs/man or completions/
// differ from what the command tree generates. Fix: go run ./cmd/fence gen-docs .
func TestGeneratedDocsAreCurrent(t *testing.T) {
	tmp := t.TempDir()
	if err := GenDocs(tmp); err != nil {
		t.Fatal(err)
	}
	repo := filepath.Join("..", "..")
	for _, d := range []struct{ dir, glob string }{
		{filepath.Join("docs", "cli"), "*.md"},
		{filepath.Join("docs", "man"), "*.1"},
		{"completions", "fence.*"},
	} {
		want := listFiles(t, filepath.Join(tmp, d.dir), d.glob)
		have := listFiles(t, filepath.Join(repo, d.dir), d.glob)
		if len(want) == 0 {
			t.Fatalf("%s: nothing generated", d.dir)
		}
		for name, content := range want {
			got, ok := have[name]
			switch {
			case !ok:
				t.Errorf("%s/%s is missing", d.dir, name)
			case got != content:
				t.Errorf("%s/%s is stale", d.dir, name)
			}
		}
		for name := range have {
			if _, ok := want[name]; !ok {
				t.Errorf("%s/%s is no longer generated", d.dir, name)
			}
		}
	}
	if t.Failed() {
		t.Log("regenerate with: go run ./cmd/fence gen-docs .")
	}
}

func listFiles(t *testing.T, dir, glob string) map[string]string {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(dir, glob))
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(paths)
	m := map[string]string{}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		m[filepath.Base(p)] = string(b)
	}
	return m
}
