package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/fence-dev/fence/internal/release"
)

// TestReleaseBuilds: fence and fence-monitor, built with release.Tags as
// they are shipped, keep the Go linker's dead-code elimination whole. A
// reachable function that calls reflect's Method or MethodByName with a name
// the linker cannot see (text/template's evaluator, reached from
// golang.org/x/net/trace through html/template without grpcnotrace) makes it
// keep every exported method of every type it keeps: 5.3 MB more of fence,
// and a slower start of every command. The linker marks such a function
// <ReflectMethod> in its -dumpdep output.
//
// And every build of the two that the project describes uses the tags.
func TestReleaseBuilds(t *testing.T) {
	for _, pkg := range []string{"cmd/fence", "cmd/fence-monitor"} {
		t.Run(filepath.Base(pkg), func(t *testing.T) {
			cmd := exec.Command("go", "build", "-tags", release.Tags, "-ldflags=-dumpdep", "-o", os.DevNull, "github.com/fence-dev/fence/"+pkg)
			cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
			var out, errOut bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &errOut
			if err := cmd.Run(); err != nil {
				t.Fatalf("go build: %v\n%s", err, tail(errOut.String()))
			}
			if n := strings.Count(errOut.String(), "\n"); n < 1000 {
				t.Fatalf("the linker's -dumpdep printed %d lines: not its dependency graph\n%s", n, tail(errOut.String()))
			}
			if bad := reflectMethodCallers(errOut.String()); len(bad) > 0 {
				t.Fatalf("%s links functions that turn off the linker's dead-code elimination of methods: %s "+
					"(go build -tags %s -ldflags=-dumpdep shows what reaches them)", pkg, strings.Join(bad, ", "), release.Tags)
			}
		})
	}

	t.Run("described", func(t *testing.T) {
		root := filepath.Join("..", "..")
		tagged := regexp.MustCompile(`-tags ` + regexp.QuoteMeta(release.Tags) + `\b`)
		builds := regexp.MustCompile(`(go|\$\(GO\)) build\b.*\./cmd/fence(-monitor)?\b`)
		// Every build of cmd/fence or cmd/fence-monitor in these files is
		// tagged; .ci/run also builds fence plainly, as `go install` does,
		// after its tagged builds.
		for _, f := range []string{"Makefile", "README.md", ".ci/run"} {
			b, err := os.ReadFile(filepath.Join(root, f))
			if err != nil {
				t.Fatal(err)
			}
			seen := map[string]bool{}
			for i, line := range strings.Split(string(b), "\n") {
				m := builds.FindStringSubmatch(line)
				if m == nil || strings.Contains(line, "fence-watchdog") || strings.Contains(line, "GOOS=darwin") {
					continue
				}
				bin := "fence" + m[2]
				if !tagged.MatchString(line) {
					if f == ".ci/run" && seen[bin] {
						continue // the plain build, after the tagged one
					}
					t.Errorf("%s:%d builds %s without -tags %s: %s", f, i+1, bin, release.Tags, strings.TrimSpace(line))
				}
				seen[bin] = true
			}
			if !seen["fence"] {
				t.Errorf("%s: no build of cmd/fence found: the check above saw nothing", f)
			}
		}
		b, err := os.ReadFile(filepath.Join(root, "goreleaser.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		var g struct {
			Builds []struct {
				ID   string   `yaml:"id"`
				Main string   `yaml:"main"`
				Tags []string `yaml:"tags"`
			} `yaml:"builds"`
		}
		if err := yaml.Unmarshal(b, &g); err != nil {
			t.Fatal(err)
		}
		var mains []string
		for _, bd := range g.Builds {
			mains = append(mains, bd.Main)
			if (bd.Main == "./cmd/fence" || bd.Main == "./cmd/fence-monitor") && !slices.Contains(bd.Tags, release.Tags) {
				t.Errorf("goreleaser.yaml: build %q (%s) has tags %v, want %s among them", bd.ID, bd.Main, bd.Tags, release.Tags)
			}
		}
		if !slices.Contains(mains, "./cmd/fence") || !slices.Contains(mains, "./cmd/fence-monitor") {
			t.Errorf("goreleaser.yaml builds %v: fence or fence-monitor is missing", mains)
		}
	})
}

// reflectMethodCallers are the functions the linker's -dumpdep output marks
// <ReflectMethod>, outside package reflect itself.
func reflectMethodCallers(dump string) []string {
	var bad []string
	for _, line := range strings.Split(dump, "\n") {
		from, _, ok := strings.Cut(line, " -> ")
		if !ok || !strings.Contains(from, "<ReflectMethod>") {
			continue
		}
		fn := strings.TrimSpace(strings.Replace(from, "<ReflectMethod>", "", 1))
		if !strings.HasPrefix(fn, "reflect.") && !slices.Contains(bad, fn) {
			bad = append(bad, fn)
		}
	}
	return bad
}

// tail is the end of a long output.
func tail(s string) string {
	if len(s) > 2000 {
		return "…" + s[len(s)-2000:]
	}
	return s
}
