package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/fence-dev/fence/internal/cli"
	"github.com/fence-dev/fence/internal/exitcode"
)

// The hand-written documentation: README.md and docs/*.md (docs/cli and
// docs/man are generated from the command tree, so they cannot drift).
func handDocs(t *testing.T, repo string) map[string]string {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(repo, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	paths = append(paths, filepath.Join(repo, "README.md"))
	docs := map[string]string{}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(repo, p)
		docs[rel] = string(b)
	}
	return docs
}

// foreignFlags are flags the docs name that belong to other programs.
var foreignFlags = map[string]string{
	"--auto-compaction-retention": "etcd", "--data-dir": "etcd", "--name": "etcd", "--initial-cluster": "etcd",
	"--bump-revision": "etcdutl", "--mark-compacted": "etcdutl", "--etcd-data-dir": "bench/run",
	"--snapshot": "goreleaser", "--clean": "goreleaser", "--skip": "goreleaser", "--build": ".ci/package",
	"--collector": "node_exporter", "--fencing-token": "the example job", "--token-from-env": "the example job",
	"--backend": "bench/run", "--cpuprofile": "go test", "--smoke": "bench/run", "--now": "systemctl",
	"--n": "bench/run", "--system": "groupadd", "--listen-client-urls": "etcd",
	"--baseline": "bench/run", "--compare": "bench/run", "--election-timeout": "etcd", "--pre-vote": "etcd",
}

// fenceNames is what the command tree, the exit code table and the code's
// JSON tags and FENCE_ variables offer.
type fenceNames struct {
	flags, env, json map[string]bool
	codes            map[int]bool
}

func collectNames(t *testing.T, repo string) fenceNames {
	t.Helper()
	n := fenceNames{flags: map[string]bool{"--help": true}, env: map[string]bool{}, json: map[string]bool{},
		codes: map[int]bool{}}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		add := func(f *pflag.Flag) {
			n.flags["--"+f.Name] = true
			if f.Shorthand != "" {
				n.flags["-"+f.Shorthand] = true
			}
		}
		c.Flags().VisitAll(add)
		c.PersistentFlags().VisitAll(add)
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	root := cli.NewRootCmd(cli.NewFactory(cli.Test(nil, nil)))
	walk(root)
	// Every global flag is also FENCE_ + its name.
	root.PersistentFlags().VisitAll(func(f *pflag.Flag) {
		n.env["FENCE_"+strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))] = true
	})
	for _, c := range []int{exitcode.OK, exitcode.No, exitcode.Busy, exitcode.LeaseLost, exitcode.Stale,
		exitcode.Deadline, exitcode.Failure, exitcode.CannotExec, exitcode.NotFound} {
		n.codes[c] = true
	}
	// FENCE_ variables and JSON field names as the program's Go code spells them.
	envRe := regexp.MustCompile(`"(FENCE_[A-Z0-9_]+)`)
	jsonRe := regexp.MustCompile("json:\"([a-z0-9_]+)")
	// Test code counts for the variables only: the knobs of the test suites
	// (FENCE_CLUSTER_TESTS) are documented too, and so are the benchmark
	// harness's (bench/: FENCE_BENCH_ROUNDS, in docs/benchmarks.md).
	for _, dir := range []string{"internal", "pkg", "test", "bench"} {
		err := filepath.Walk(filepath.Join(repo, dir), func(p string, info os.FileInfo, err error) error {
			if err != nil || info.IsDir() || !strings.HasSuffix(p, ".go") {
				return err
			}
			// Only the variables of test code and of the harness: their JSON is not fence's.
			envOnly := strings.HasSuffix(p, "_test.go") || dir == "bench"
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			for _, m := range envRe.FindAllStringSubmatch(string(b), -1) {
				n.env[strings.TrimSuffix(m[1], "_")] = true
			}
			if envOnly {
				return nil
			}
			for _, m := range jsonRe.FindAllStringSubmatch(string(b), -1) {
				n.json[m[1]] = true
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return n
}

var (
	flagRe     = regexp.MustCompile("(?:^|[\\s`(\\[|,=])(--[a-z][a-z0-9-]*)")
	numberedRe = regexp.MustCompile(`_([0-9]+|i)$`)
	envRe      = regexp.MustCompile(`\bFENCE_[A-Z0-9_]*[A-Z0-9]\b`)
	// "exit 76", "exits 1", "exit code 125", "(exit 125)", a row of an exit code table.
	codeRe     = regexp.MustCompile(`\bexit(?:s|ing)?(?: code| with)? (\d{1,3})\b`)
	codeRowRe  = regexp.MustCompile(`^\| (\d{1,3})(?:, (\d{1,3}))? \|`)
	jsonRowRe  = regexp.MustCompile("(?m)^\\| `([a-z0-9_]+)` \\| ")
	jsonKeyRe  = regexp.MustCompile(`"([a-z0-9_]+)":`)
	jsonFenced = regexp.MustCompile("(?s)```json\n(.*?)```")
)

// docNameProblems lists every flag, FENCE_ variable, exit code and JSON
// field that the docs name and fence does not have.
func docNameProblems(docs map[string]string, n fenceNames) []string {
	var bad []string
	for file, text := range docs {
		for _, m := range flagRe.FindAllStringSubmatch(text, -1) {
			if f := m[1]; !n.flags[f] && foreignFlags[f] == "" {
				bad = append(bad, fmt.Sprintf("%s: flag %s is no flag of any fence command (another program's? add it to foreignFlags)", file, f))
			}
		}
		for _, v := range envRe.FindAllString(text, -1) {
			// FENCE_TOKEN_2 is one of the numbered FENCE_TOKEN_i.
			if !n.env[v] && !n.env[numberedRe.ReplaceAllString(v, "")] {
				bad = append(bad, fmt.Sprintf("%s: environment variable %s is not one fence reads or sets", file, v))
			}
		}
		var codes []string
		for _, m := range codeRe.FindAllStringSubmatch(text, -1) {
			codes = append(codes, m[1])
		}
		for _, row := range exitCodeRows(text) {
			if m := codeRowRe.FindStringSubmatch(row); m != nil {
				codes = append(codes, m[1])
				if m[2] != "" {
					codes = append(codes, m[2])
				}
			} else if !strings.HasPrefix(row, "|---") && !strings.HasPrefix(row, "| N |") && !strings.HasPrefix(row, "| 128+N |") {
				bad = append(bad, fmt.Sprintf("%s: exit code table row %q names no code", file, row))
			}
		}
		for _, c := range codes {
			v, _ := strconv.Atoi(c)
			if !n.codes[v] && v <= 128 {
				bad = append(bad, fmt.Sprintf("%s: exit code %d is not in fence's exit code table (internal/exitcode)", file, v))
			}
		}
		if file != filepath.Join("docs", "json.md") {
			continue
		}
		fields := map[string]bool{}
		for _, m := range jsonRowRe.FindAllStringSubmatch(text, -1) {
			fields[m[1]] = true
		}
		for _, block := range jsonFenced.FindAllStringSubmatch(text, -1) {
			for _, m := range jsonKeyRe.FindAllStringSubmatch(block[1], -1) {
				fields[m[1]] = true
			}
		}
		for _, m := range jsonKeyRe.FindAllStringSubmatch(strings.Join(inlineCode(text), " "), -1) {
			fields[m[1]] = true
		}
		for f := range fields {
			if !n.json[f] {
				bad = append(bad, fmt.Sprintf("%s: JSON field %q is no json tag of the code", file, f))
			}
		}
	}
	sort.Strings(bad)
	return bad
}

// exitCodeRows are the rows of the tables headed "| code | meaning |".
func exitCodeRows(text string) []string {
	var rows []string
	in := false
	for _, line := range strings.Split(text, "\n") {
		switch {
		case strings.HasPrefix(line, "| code | meaning |"):
			in = true
		case in && strings.HasPrefix(line, "|"):
			rows = append(rows, line)
		default:
			in = false
		}
	}
	return rows
}

func inlineCode(text string) []string {
	var spans []string
	for _, m := range regexp.MustCompile("`([^`\n]+)`").FindAllStringSubmatch(text, -1) {
		spans = append(spans, m[1])
	}
	return spans
}

// TestDocsNameReal: every flag, FENCE_ environment variable, exit code and
// JSON field that README.md and docs/*.md name is one fence has: a flag of a
// command of the tree (or of another program the docs name, listed in
// foreignFlags), a global flag's FENCE_ name or a variable the code reads or
// sets, a code of internal/exitcode (or 128+N), a json tag of the code.
func TestDocsNameReal(t *testing.T) {
	repo := filepath.Join("..", "..", "..")
	for _, p := range docNameProblems(handDocs(t, repo), collectNames(t, repo)) {
		t.Error(p)
	}
}

// TestDocsNameRealCatchesPlantedNames: a wrong flag, variable, exit code or
// JSON field planted in the docs is reported, each once.
func TestDocsNameRealCatchesPlantedNames(t *testing.T) {
	repo := filepath.Join("..", "..", "..")
	n := collectNames(t, repo)
	docs := handDocs(t, repo)
	docs["README.md"] += "\nUse `fence run --time-to-live 5s job -- true` with FENCE_TIMEOUT set; it exits 78.\n"
	docs[filepath.Join("docs", "json.md")] += "\n| `lease_token` | number | planted |\n"
	want := []string{
		`README.md: environment variable FENCE_TIMEOUT is not one fence reads or sets`,
		`README.md: exit code 78 is not in fence's exit code table (internal/exitcode)`,
		`README.md: flag --time-to-live is no flag of any fence command (another program's? add it to foreignFlags)`,
		`docs/json.md: JSON field "lease_token" is no json tag of the code`,
	}
	got := docNameProblems(docs, n)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("planted names: got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
