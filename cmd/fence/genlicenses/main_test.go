package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLicensesAreCurrent: the committed licence files are what genlicenses
// writes from the modules compiled into fence now (a dependency added,
// removed or upgraded changes them: run go run ./cmd/fence/genlicenses .).
func TestLicensesAreCurrent(t *testing.T) {
	repo, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	if err := Generate(repo, out); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"packaging/third-party-licenses.txt", "packaging/deb/copyright"} {
		want, err := os.ReadFile(filepath.Join(out, f))
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join(repo, f))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s is stale: run go run ./cmd/fence/genlicenses .", f)
		}
	}
}

// TestModulesAreWhatIsLinked: the list is what the fence binary links (the
// etcd client is, its server and the test tools are not), each module with
// an identified licence and its text.
func TestModulesAreWhatIsLinked(t *testing.T) {
	mods, err := Modules("../../..")
	if err != nil {
		t.Fatal(err)
	}
	has := map[string]Module{}
	for _, m := range mods {
		if m.Licence == "" || len(m.Files) == 0 {
			t.Errorf("%s: licence %q, %d files", m.Path, m.Licence, len(m.Files))
		}
		has[m.Path] = m
	}
	for _, p := range []string{"Go standard library", "go.etcd.io/etcd/client/v3", "github.com/spf13/cobra", "github.com/charmbracelet/bubbletea"} {
		if _, ok := has[p]; !ok {
			t.Errorf("%s is compiled into fence but not listed", p)
		}
	}
	for _, p := range []string{"go.etcd.io/etcd/server/v3", "github.com/rogpeppe/go-internal", "github.com/google/licensecheck", "pgregory.net/rapid"} {
		if _, ok := has[p]; ok {
			t.Errorf("%s is not compiled into fence but listed", p)
		}
	}
	if m := has["go.etcd.io/etcd/client/v3"]; m.Licence != "Apache-2.0" {
		t.Errorf("etcd's client: licence %q, want Apache-2.0", m.Licence)
	}
	if m := has["Go standard library"]; m.Licence != "BSD-3-Clause" || !strings.HasPrefix(m.Version, "go1.") {
		t.Errorf("Go: %+v", m)
	}
}
