package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/spf13/cobra"

	st "github.com/fence-dev/fence/cmd/fence/internal/scripttest"
	"github.com/fence-dev/fence/internal/cli"
)

// The shell recipes of the documentation and of the help text must not run
// the protected work unlocked, with or without set -e, in sh and in bash.
//
// Which blocks are recipes:
//   - in README.md and docs/*.md, every fenced block marked sh, bash or shell
//     (a script) or cron (crontab lines: the command after the schedule, and
//     after the user in a system crontab, one that names /etc/cron.d or
//     /etc/crontab), unless the line before it is <!-- not a recipe: WHY -->.
//     <!-- recipe: exits 0 when busy --> marks a recipe that skips a busy
//     lock on purpose (it must still not run the work);
//   - in the help text, every command's Example, unless notRecipes names the
//     command.
//
// The protected work is what a recipe runs under the lock: the commands in
// recipeWork, each replaced by a stand-in that records that it ran and the
// token it got (in $FENCE_TOKEN or as an argument). Paths under /usr/local/bin
// and /var/lib are moved into the test's directory.

// recipeWork are the commands that stand for the protected work in the
// recipes. A recipe whose work is not among them fails its free-lock run.
var recipeWork = []string{
	"./compute-and-store.sh", "./compute",
	"/usr/local/bin/reindex", "/usr/local/bin/backup-db", "/usr/local/bin/backup",
	"backup-db", "export_part_1", "export_part_2", "make-report", "generate", "upload",
	"/usr/local/bin/charge-customers", "./migrate",
}

// notRecipes are the commands whose Example is not a recipe to run, and why.
var notRecipes = map[string]string{
	"fence check":           "a step inside a recipe, for the holder's $FENCE_TOKEN",
	"fence renew":           "a step inside a recipe, for the holder's $FENCE_LEASE_ID",
	"fence release":         "a step inside a recipe, for the holder's $FENCE_LEASE_ID",
	"fence list":            "inspection, no work",
	"fence top":             "the interactive dashboard",
	"fence exporter":        "a server",
	"fence config":          "a config file",
	"fence shards run":      "a long-running worker of a group, one per host",
	"fence revoke":          "an operator's command, no work",
	"fence limit":           "the kill switch: an operator's command, no work",
	"fence freeze":          "the kill switch: an operator's command, no work",
	"fence thaw":            "the kill switch: an operator's command, no work",
	"fence once list":       "inspection, no work",
	"fence postgres schema": "a DBA pipes the schema into psql on the database server; no lock is taken",
}

type recipe struct {
	where     string // file:line, or the command's path for help text
	text      string
	busyIsOK  bool   // <!-- recipe: exits 0 when busy -->
	notRecipe string // why not, when marked
}

var (
	fenceRe = regexp.MustCompile("^( *)```\\s*(\\w*)\\s*$")
	markRe  = regexp.MustCompile(`^<!--\s*(not a recipe|recipe):?\s*(.*?)\s*-->$`)
)

// docRecipes extracts the shell and cron blocks of the markdown file path.
func docRecipes(t *testing.T, path string) []recipe {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	var out []recipe
	for i := 0; i < len(lines); i++ {
		m := fenceRe.FindStringSubmatch(lines[i])
		if m == nil {
			continue
		}
		indent, lang, start := m[1], m[2], i
		var body []string
		for i++; i < len(lines) && !fenceRe.MatchString(lines[i]); i++ {
			body = append(body, strings.TrimPrefix(lines[i], indent))
		}
		switch lang {
		case "sh", "bash", "shell", "cron":
		default:
			continue
		}
		r := recipe{where: fmt.Sprintf("%s:%d", strings.TrimPrefix(path, "../../"), start+1)}
		for j := start - 1; j >= 0 && strings.TrimSpace(lines[j]) != ""; j-- {
			mk := markRe.FindStringSubmatch(strings.TrimSpace(lines[j]))
			if mk == nil {
				break
			}
			switch {
			case mk[1] == "not a recipe" && mk[2] != "":
				r.notRecipe = mk[2]
			case mk[1] == "recipe" && mk[2] == "exits 0 when busy":
				r.busyIsOK = true
			default:
				t.Errorf("%s: unknown mark %q (want <!-- not a recipe: WHY --> or <!-- recipe: exits 0 when busy -->)", r.where, lines[j])
			}
		}
		text := strings.Join(body, "\n") + "\n"
		if lang == "cron" {
			text, err = cronCommands(text)
			if err != nil {
				t.Errorf("%s: %v", r.where, err)
				continue
			}
		}
		r.text = text
		out = append(out, r)
	}
	return out
}

// cronCommands turns crontab lines into the script of their commands.
func cronCommands(tab string) (string, error) {
	system := strings.Contains(tab, "/etc/cron.d") || strings.Contains(tab, "/etc/crontab")
	var script strings.Builder
	for _, l := range strings.Split(tab, "\n") {
		l = strings.TrimSpace(l)
		if l == "" || l[0] == '#' {
			continue
		}
		if i := strings.IndexByte(l, '='); i > 0 && !strings.ContainsAny(l[:i], " \t") {
			continue // an environment setting (MAILTO=...)
		}
		if strings.HasSuffix(l, `\`) {
			return "", fmt.Errorf("cron has no continuation lines: %q", l)
		}
		skip := 5
		if strings.HasPrefix(l, "@") {
			skip = 1
		}
		if system {
			skip++
		}
		f := strings.Fields(l)
		if len(f) <= skip {
			return "", fmt.Errorf("not a crontab line: %q", l)
		}
		for range skip {
			l = strings.TrimSpace(strings.TrimPrefix(l, f[0]))
			f = f[1:]
		}
		if strings.Contains(strings.ReplaceAll(l, `\%`, ""), "%") {
			return "", fmt.Errorf("cron turns %% into a newline: %q", l)
		}
		script.WriteString(l + "\n")
	}
	return script.String(), nil
}

// helpRecipes are the Examples of the command tree.
func helpRecipes(t *testing.T) []recipe {
	var out []recipe
	seen := map[string]bool{}
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Example != "" {
			path := c.CommandPath()
			seen[path] = true
			var body []string
			for _, l := range strings.Split(c.Example, "\n") {
				body = append(body, strings.TrimPrefix(l, "  "))
			}
			out = append(out, recipe{where: path + " --help", text: strings.Join(body, "\n") + "\n", notRecipe: notRecipes[path]})
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(cli.NewRootCmd(cli.NewFactory(cli.Test(nil, nil))))
	for path := range notRecipes {
		if !seen[path] {
			t.Errorf("notRecipes names %q, which has no Example", path)
		}
	}
	return out
}

func allRecipes(t *testing.T) []recipe {
	repo := filepath.Join("..", "..")
	files, err := filepath.Glob(filepath.Join(repo, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	files = append([]string{filepath.Join(repo, "README.md")}, files...)
	var rs []recipe
	for _, f := range files {
		rs = append(rs, docRecipes(t, f)...)
	}
	return append(rs, helpRecipes(t)...)
}

// TestRecipes runs every recipe of the docs and of the help text with sh and
// bash: with the lock free it must run the work (with a token) and leave the
// lock free; with the lock busy (held by another fence acquire), the
// coordinator unreachable, or an invalid lock name, it must run none of the
// work and exit non-zero, with set -e and without.
func TestRecipes(t *testing.T) {
	realFence, err := exec.LookPath("fence")
	if err != nil {
		t.Fatal(err)
	}
	shells := []string{"sh", "bash"}
	for _, sh := range shells {
		if _, err := exec.LookPath(sh); err != nil {
			t.Fatalf("no %s: %v", sh, err)
		}
	}
	if _, err := exec.LookPath("timeout"); err != nil {
		t.Fatalf("no timeout(1): %v", err)
	}
	closed := closedPort(t)
	n := 0
	for _, r := range allRecipes(t) {
		if r.notRecipe != "" {
			continue
		}
		n++
		t.Run(strings.NewReplacer("/", "_", " ", "_").Replace(r.where), func(t *testing.T) {
			t.Parallel()
			var locks []string
			for _, sh := range shells {
				ran := runRecipe(t, realFence, sh, r.text, condFree, "")
				if ran.code != 0 {
					t.Fatalf("%s, lock free: exit %d, want 0; if this block is not a recipe, mark it <!-- not a recipe: WHY -->\n%s\nstderr:\n%s", sh, ran.code, r.text, ran.stderr)
				}
				if len(ran.work) == 0 {
					t.Fatalf("%s, lock free: the work did not run (is it among recipeWork?)\n%s\nstderr:\n%s", sh, r.text, ran.stderr)
				}
				for _, w := range ran.work {
					if !w.hasToken() {
						t.Errorf("%s, lock free: %s ran without a token in $FENCE_TOKEN or its arguments: %q\n%s", sh, w.name, w.line, r.text)
					}
				}
				if len(ran.locks) == 0 {
					t.Fatalf("%s: the recipe took no lock with fence acquire or fence run\n%s", sh, r.text)
				}
				for _, l := range ran.locks {
					if !strings.Contains(r.text, l) {
						t.Fatalf("lock %q is not written in the recipe (a literal name is needed to test bad input)\n%s", l, r.text)
					}
				}
				if len(ran.stillHeld) > 0 {
					t.Errorf("%s, lock free: the recipe left %q held", sh, ran.stillHeld)
				}
				locks = ran.locks
			}
			bad := badInput(r.text, locks)
			for _, c := range []struct {
				cond condition
				text string
			}{{condBusy, r.text}, {condUnreachable, r.text}, {condBadInput, bad}} {
				for _, sh := range shells {
					for _, sete := range []bool{true, false} {
						text, err := withSetE(c.text, sete)
						if err != nil {
							t.Fatal(err)
						}
						what := fmt.Sprintf("%s, %s, set -e %v", sh, c.cond, sete)
						ran := runRecipe(t, realFence, sh, text, c.cond, closed, locks...)
						if len(ran.work) > 0 {
							t.Errorf("%s: the work ran unlocked: %q\n%s\nstderr:\n%s", what, ran.work[0].line, text, ran.stderr)
						}
						if ran.code == 0 && !(c.cond == condBusy && r.busyIsOK) {
							t.Errorf("%s: exit 0, want non-zero\n%s\nstderr:\n%s", what, text, ran.stderr)
						}
						if c.cond == condBusy && len(ran.stillHeld) != len(locks) {
							t.Errorf("%s: the other holder lost its lease: held after the recipe: %q, want %q", what, ran.stillHeld, locks)
						}
					}
				}
			}
		})
	}
	if n < 5 {
		t.Fatalf("found only %d recipes", n)
	}
}

type condition string

const (
	condFree        condition = "lock free"
	condBusy        condition = "lock busy"
	condUnreachable condition = "coordinator unreachable"
	condBadInput    condition = "invalid lock name"
)

// badLockName is refused by every command: 257 bytes.
var badLockName = strings.Repeat("x", 257)

// badInput is text with every lock name written in it replaced by an
// invalid one.
func badInput(text string, locks []string) string {
	for _, l := range locks {
		re := regexp.MustCompile(`(^|[\s'"=])` + regexp.QuoteMeta(l) + `($|[\s'";|&)])`)
		for prev := ""; prev != text; {
			prev = text
			text = re.ReplaceAllString(text, "${1}"+badLockName+"${2}")
		}
	}
	return text
}

// withSetE is text with set -e as its first command, or without any set -e.
func withSetE(text string, on bool) (string, error) {
	var kept []string
	for _, l := range strings.Split(text, "\n") {
		if strings.TrimSpace(l) != "set -e" {
			kept = append(kept, l)
		}
	}
	text = strings.Join(kept, "\n")
	if strings.Contains(text, "set -") {
		return "", fmt.Errorf("cannot take set -e out of the recipe:\n%s", text)
	}
	if on {
		return "set -e\n" + text, nil
	}
	return text, nil
}

// closedPort is a loopback port nothing listens on.
func closedPort(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

type workRun struct {
	name, line string
	token      string // $FENCE_TOKEN
	args       []string
}

// hasToken: the work got a positive token in $FENCE_TOKEN or an argument.
func (w workRun) hasToken() bool {
	for _, s := range append([]string{w.token}, w.args...) {
		if n, err := strconv.ParseInt(s, 10, 64); err == nil && n > 0 {
			return true
		}
	}
	return false
}

type recipeRun struct {
	code      int
	stderr    string
	work      []workRun
	locks     []string // taken with fence acquire or fence run, as fence parsed them
	stillHeld []string // of the locks, those held once the recipe ended
}

// standIn records a run of the work in a file of its own (two of them may
// run at once, in a pipeline): its name, $FENCE_TOKEN and its arguments.
// Then it passes its input on.
const standIn = `#!/bin/sh
printf '%s\0' "$0" "${FENCE_TOKEN-}" "$@" > "$(mktemp "$RECIPE_WORK/run.XXXXXX")"
cat
echo "output of $0"
`

// fenceShim is fence for the recipes: it records each call's arguments and
// runs the real fence, under a timeout when one is set (a recipe that waits
// for a busy lock gets SIGINT, as from a user's ^C).
const fenceShim = `#!/bin/sh
printf '%s\0' "$@" > "$(mktemp "$RECIPE_CALLS/call.XXXXXX")"
if [ -n "$RECIPE_TIMEOUT" ]; then
	exec timeout --preserve-status -s INT "$RECIPE_TIMEOUT" "$RECIPE_FENCE" "$@"
fi
exec "$RECIPE_FENCE" "$@"
`

// runRecipe runs text with shell sh in a directory of its own, in condition
// cond, and reports what happened. For condBusy, another holder first takes
// busy.
func runRecipe(t *testing.T, realFence, sh, text string, cond condition, closedAddr string, busy ...string) recipeRun {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	calls := filepath.Join(dir, "calls")
	work := filepath.Join(dir, "work")
	for _, d := range []string{bin, calls, work, filepath.Join(dir, "usr", "local", "bin")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write := func(path, content string) {
		if err := os.WriteFile(path, []byte(content), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(bin, "fence"), fenceShim)
	for _, w := range recipeWork {
		if strings.Contains(w, "/") { // ./x in the recipe's directory, /usr/local/bin/x moved there
			write(filepath.Join(dir, w), standIn)
		} else {
			write(filepath.Join(bin, w), standIn)
		}
	}
	// Absolute paths of the recipes move into dir.
	for _, m := range regexp.MustCompile(`/var/lib/\S+`).FindAllString(text, -1) {
		if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(m)), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	text = regexp.MustCompile(`(^|[\s'"=])(/usr/local/bin/|/var/lib/)`).ReplaceAllString(text, "${1}"+dir+"${2}")
	write(filepath.Join(dir, "recipe"), text)

	state := filepath.Join(dir, "state")
	env := append(st.CleanEnviron(),
		"PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"),
		"HOME="+dir, "XDG_CONFIG_HOME="+filepath.Join(dir, ".config"), "XDG_STATE_HOME="+filepath.Join(dir, ".state"),
		"FENCE_HOLDER=recipe",
		"RECIPE_FENCE="+realFence, "RECIPE_CALLS="+calls, "RECIPE_WORK="+work)
	fenceEnv := append(st.CleanEnviron(), "FENCE_STATE_DIR="+state, "XDG_CONFIG_HOME="+filepath.Join(dir, ".config"))
	switch cond {
	case condUnreachable:
		env = append(env, "FENCE_ENDPOINTS="+closedAddr, "FENCE_DIAL_TIMEOUT=500ms")
	case condBusy:
		env = append(env, "FENCE_STATE_DIR="+state, "RECIPE_TIMEOUT=1s")
		for _, l := range busy {
			if code, stderr := st.Run(t, slices.Concat(fenceEnv, []string{"FENCE_HOLDER=other"}), "acquire", l, "--ttl", "10m"); code != 0 {
				t.Fatalf("the other holder could not take %s: exit %d: %s", l, code, stderr)
			}
		}
	default:
		env = append(env, "FENCE_STATE_DIR="+state)
	}

	ctx, cancel := context.WithTimeout(context.Background(), st.HangGuard)
	defer cancel()
	cmd := exec.CommandContext(ctx, sh, "recipe")
	cmd.Dir, cmd.Env = dir, env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = time.Second
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // whatever the recipe left behind
	var res recipeRun
	var ee *exec.ExitError
	switch {
	case ctx.Err() != nil:
		t.Fatalf("%s, %s: still running after %v\n%s\nstderr:\n%s", sh, cond, st.HangGuard, text, stderr.String())
	case errors.As(err, &ee):
		res.code = ee.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	res.stderr = stderr.String()

	for _, r := range records(t, work) {
		if len(r) < 2 {
			t.Fatalf("a stand-in of the work recorded %q", r)
		}
		res.work = append(res.work, workRun{name: strings.TrimPrefix(r[0], dir), line: fmt.Sprintf("%q", r), token: r[1], args: r[2:]})
	}
	res.locks = lockedBy(t, calls)
	held := busy
	if cond == condFree {
		held = res.locks
	}
	if cond == condFree || cond == condBusy {
		for _, l := range held {
			if code, _ := st.Run(t, fenceEnv, "status", l); code == 0 {
				res.stillHeld = append(res.stillHeld, l)
			}
		}
	}
	return res
}

// records reads the files of NUL-terminated strings in dir.
func records(t *testing.T, dir string) [][]string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out [][]string
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00"))
	}
	return out
}

// lockedBy reads the fence calls recorded in dir and returns the locks that
// acquire and run took (each of several), as fence's own command tree
// parses the arguments.
func lockedBy(t *testing.T, dir string) []string {
	t.Helper()
	var locks []string
	for _, args := range records(t, dir) {
		root := cli.NewRootCmd(cli.NewFactory(cli.Test(nil, nil)))
		cmd, rest, err := root.Find(args)
		if err != nil || (cmd.Name() != "acquire" && cmd.Name() != "run") {
			continue
		}
		if err := cmd.ParseFlags(rest); err != nil {
			continue
		}
		// Every LOCK: fence run takes them before "--", acquire all.
		pos := cmd.Flags().Args()
		if n := cmd.Flags().ArgsLenAtDash(); cmd.Name() == "run" && n >= 0 {
			pos = pos[:n]
		}
		for _, l := range pos {
			if !slices.Contains(locks, l) {
				locks = append(locks, l)
			}
		}
	}
	slices.Sort(locks)
	return locks
}
