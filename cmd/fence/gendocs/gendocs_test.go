package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// TestGeneratedDocsAreCurrent fails when docs/cli, docs/man or completions/
// differ from what the command tree generates. Fix: go run ./cmd/fence/gendocs .
func TestGeneratedDocsAreCurrent(t *testing.T) {
	tmp := t.TempDir()
	if err := GenDocs(tmp); err != nil {
		t.Fatal(err)
	}
	repo := filepath.Join("..", "..", "..")
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
		t.Log("regenerate with: go run ./cmd/fence/gendocs .")
	}
}

// TestFenceLinksNoDocRenderer: the fence binary does not link cobra/doc and
// its renderers (their package initialisation would cost every fence start);
// they belong to this program only.
func TestFenceLinksNoDocRenderer(t *testing.T) {
	for _, pkg := range fenceDeps(t) {
		switch pkg {
		case "github.com/spf13/cobra/doc", "github.com/cpuguy83/go-md2man/v2/md2man", "github.com/russross/blackfriday/v2":
			t.Errorf("cmd/fence links %s: generate docs in cmd/fence/gendocs only", pkg)
		}
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

// fenceDeps lists the packages cmd/fence links, with `go list`.
func fenceDeps(t *testing.T) []string {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to list cmd/fence's packages")
	}
	out, err := exec.Command(gobin, "list", "-deps", "..").Output()
	if err != nil {
		t.Fatalf("go list -deps ./cmd/fence: %v", err)
	}
	return strings.Fields(string(out))
}

// TestPackageTableIsCurrent keeps docs/architecture.md's package tables true
// to the tree: every package of the module is named in a row, and every
// package a row names exists.
func TestPackageTableIsCurrent(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to list the module's packages")
	}
	repo := filepath.Join("..", "..", "..")
	cmd := exec.Command(gobin, "list", "-f", "{{.Dir}}", "./...")
	cmd.Dir = repo
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list ./...: %v", err)
	}
	abs, err := filepath.Abs(repo)
	if err != nil {
		t.Fatal(err)
	}
	tree := map[string]bool{}
	for _, dir := range strings.Fields(string(out)) {
		rel, err := filepath.Rel(abs, dir)
		if err != nil {
			t.Fatal(err)
		}
		tree[filepath.ToSlash(rel)] = true
	}
	doc, err := os.ReadFile(filepath.Join(repo, "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	named := map[string]bool{}
	for _, line := range strings.Split(string(doc), "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 3 || !strings.HasPrefix(line, "| `") {
			continue
		}
		for _, f := range strings.Split(cells[1], ",") {
			if p := strings.Trim(strings.TrimSpace(f), "`"); p != "" {
				named[p] = true
			}
		}
	}
	if len(named) == 0 {
		t.Fatal("docs/architecture.md has no package table")
	}
	for p := range tree {
		if !named[p] {
			t.Errorf("package %s is missing from docs/architecture.md's package tables", p)
		}
	}
	for p := range named {
		if !tree[p] {
			t.Errorf("docs/architecture.md names package %s, which does not exist", p)
		}
	}
}

// sharedLeaves are the module-root internal/ packages that both the library
// and the program use: Linux process facts (the local backend judges a
// holder's processes, supervision signals a command's tree) and the state
// directory's sharing rules (the local stores keep them, the CLI explains a
// permission error with them), and, for test kits and tests alike, a buffer
// safe for concurrent use. Go lets pkg/internal/ be imported only under
// pkg/, so the alternatives are a second copy of each (about 500 lines) or a
// public package; a leaf imports nothing of this module, so it sits below
// both layers.
var sharedLeaves = map[string]bool{"internal/proc": true, "internal/sharedir": true, "internal/syncbuf": true}

// TestPkgReadsDownward keeps the library below the program: no package
// under pkg/ (test kits included, tests left out) imports, directly or
// through another, the module-root internal/ tree, which belongs to the
// command line, except the shared leaves, which import nothing of this
// module. What only pkg/ uses lives in pkg/internal/.
func TestPkgReadsDownward(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to list pkg/'s packages")
	}
	cmd := exec.Command(gobin, "list", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, "-deps", "./pkg/...")
	cmd.Dir = filepath.Join("..", "..", "..")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps ./pkg/...: %v", err)
	}
	const mod = "github.com/fence-dev/fence/"
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || !strings.HasPrefix(f[0], mod) {
			continue
		}
		path := strings.TrimPrefix(f[0], mod)
		leaf := sharedLeaves[path]
		if strings.HasPrefix(path, "internal/") && !leaf {
			t.Errorf("pkg/ depends on %s", f[0])
		}
		for _, imp := range f[1:] {
			switch {
			case leaf && strings.HasPrefix(imp, mod):
				t.Errorf("%s imports %s: a shared leaf imports nothing of this module", f[0], imp)
			case strings.HasPrefix(path, "pkg/") && strings.HasPrefix(imp, mod+"internal/") && !sharedLeaves[strings.TrimPrefix(imp, mod)]:
				t.Errorf("%s imports %s: move what it needs under pkg/internal/", f[0], imp)
			}
		}
	}
}
