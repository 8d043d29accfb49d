// Package scripttest holds what fence's testscript tests share: the
// environment of a script, the expect command and helpers to run the fence
// binary that testscript.Main sets up. Only tests import it.
package scripttest

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/fence-dev/fence/pkg/cli"
)

// Commands are the programs testscript.Main provides: fence itself.
var Commands = map[string]func(){
	"fence": func() { os.Exit(cli.Main(os.Args[1:])) },
}

// Params runs the scripts in dir on the local coordinator, with its state in
// $WORK/state, no FENCE_ variable from outside and no config file outside
// $WORK. Scripts get the expect command and the variables LONG256, LONG257,
// CTRL, NEWLINE, TAB and ESC (lock names a script cannot write literally).
func Params(dir string) testscript.Params {
	return testscript.Params{
		Dir: dir,
		Setup: func(env *testscript.Env) error {
			for _, kv := range os.Environ() {
				if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "FENCE_") {
					env.Setenv(k, "")
				}
			}
			env.Setenv("FENCE_STATE_DIR", filepath.Join(env.WorkDir, "state"))
			env.Setenv("XDG_CONFIG_HOME", filepath.Join(env.WorkDir, ".config"))
			env.Setenv("XDG_STATE_HOME", filepath.Join(env.WorkDir, ".state"))
			env.Setenv("HOME", env.WorkDir)
			env.Setenv("LONG256", strings.Repeat("n", 256))
			env.Setenv("LONG257", strings.Repeat("n", 257))
			env.Setenv("CTRL", "a\x01b")
			env.Setenv("NEWLINE", "a\nb")
			env.Setenv("TAB", "a\tb")
			env.Setenv("ESC", "a\x1b[2Jb")
			return nil
		},
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			"expect": cmdExpect,
		},
	}
}

// OneErrorLine matches what fence prints on stderr when it fails.
var OneErrorLine = regexp.MustCompile(`\Afence: [^\n]+\n\z`)

// cmdExpect: expect CODE PROGRAM [ARGS...] runs PROGRAM and checks that it
// exits with CODE. When fence fails with something on stderr, that must be
// one line starting with "fence: " (never a usage dump, a panic or a
// stack). stdout and stderr can then be checked as after exec.
func cmdExpect(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 2 {
		ts.Fatalf("usage: expect CODE PROGRAM [ARGS...]")
	}
	want, err := strconv.Atoi(args[0])
	if err != nil {
		ts.Fatalf("expect: bad code %q", args[0])
	}
	err = ts.Exec(args[1], args[2:]...)
	got := 0
	if err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			ts.Fatalf("expect: %v", err)
		}
		got = ee.ExitCode()
	}
	if got != want {
		ts.Fatalf("%s exited %d, want %d", args[1], got, want)
	}
	stderr := ts.ReadFile("stderr")
	if got != 0 && stderr != "" && args[1] == "fence" && !OneErrorLine.MatchString(stderr) {
		ts.Fatalf("stderr is not one line starting with \"fence: \": %q", stderr)
	}
}

// CleanEnviron is the test's environment without FENCE_ variables.
func CleanEnviron() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "FENCE_") {
			env = append(env, kv)
		}
	}
	return env
}

// Env is an environment for fence on a local coordinator in dir, holder
// "tester".
func Env(dir string) []string {
	return append(CleanEnviron(), "FENCE_STATE_DIR="+dir, "XDG_CONFIG_HOME="+dir+"/.config", "FENCE_HOLDER=tester")
}

// Run runs fence to completion with env and returns its exit code and
// stderr.
func Run(t *testing.T, env []string, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command("fence", args...)
	cmd.Env = env
	var stderr strings.Builder
	cmd.Stderr = &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, stderr.String()
	case errors.As(err, &ee):
		return ee.ExitCode(), stderr.String()
	}
	t.Fatalf("fence %v: %v", args, err)
	return 0, ""
}

// Output runs fence to completion and returns its stdout, failing the test
// on a non-zero exit.
func Output(t *testing.T, env []string, args ...string) string {
	t.Helper()
	cmd := exec.Command("fence", args...)
	cmd.Env = env
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("fence %v: %v", args, err)
	}
	return string(out)
}
