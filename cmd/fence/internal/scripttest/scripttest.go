// Package scripttest holds what fence's testscript tests share: the
// environment of a script, the expect command and helpers to run the fence
// binary that testscript.Main sets up. Only tests import it.
package scripttest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	_ "github.com/fence-dev/fence/internal/testsig"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/fence-dev/fence/internal/cli"
	"github.com/fence-dev/fence/internal/config"
)

// SystemConfigEnv names the file a script's fence reads in place of
// /etc/fence/config.yaml (Params sets it to $WORK/etc/fence/config.yaml).
const SystemConfigEnv = "FENCETEST_SYSTEM_CONFIG"

// Commands are the programs testscript.Main provides: fence itself.
var Commands = map[string]func(){
	"fence": func() {
		if p := os.Getenv(SystemConfigEnv); p != "" {
			config.SystemConfigFile = p
		}
		os.Exit(cli.Main(os.Args[1:]))
	},
}

// Params runs the scripts in dir on the local coordinator, with its state in
// $WORK/state, no FENCE_ variable from outside and no config file outside
// $WORK (the system one is $WORK/etc/fence/config.yaml). Scripts get the
// commands expect, start, signal, expectbg and waitfile (background
// processes: see background.go) and the variables LONG256, LONG257, CTRL,
// NEWLINE, TAB, ESC, RLO (a right-to-left override, U+202E) and ZWSP (a
// zero-width space, U+200B): lock names a script cannot write literally,
// or not visibly.
func Params(dir string) testscript.Params {
	return testscript.Params{
		Dir: dir,
		Setup: func(env *testscript.Env) error {
			// No FENCE_ variable from outside: removed, not set empty (a
			// FENCE_ENDPOINTS set to nothing is refused, not unset).
			env.Vars = slices.DeleteFunc(env.Vars, func(kv string) bool {
				return strings.HasPrefix(kv, "FENCE_")
			})
			env.Setenv("FENCE_STATE_DIR", filepath.Join(env.WorkDir, "state"))
			env.Setenv("XDG_CONFIG_HOME", filepath.Join(env.WorkDir, ".config"))
			env.Setenv(SystemConfigEnv, filepath.Join(env.WorkDir, "etc", "fence", "config.yaml"))
			env.Setenv("XDG_STATE_HOME", filepath.Join(env.WorkDir, ".state"))
			env.Setenv("XDG_CACHE_HOME", filepath.Join(env.WorkDir, ".cache"))
			env.Setenv("HOME", env.WorkDir)
			env.Setenv("LONG256", strings.Repeat("n", 256))
			env.Setenv("LONG257", strings.Repeat("n", 257))
			env.Setenv("CTRL", "a\x01b")
			env.Setenv("NEWLINE", "a\nb")
			env.Setenv("TAB", "a\tb")
			env.Setenv("ESC", "a\x1b[2Jb")
			env.Setenv("RLO", "evil\u202etxt.sh")
			env.Setenv("ZWSP", "jo\u200bb")
			return nil
		},
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			"expect":   cmdExpect,
			"start":    cmdStart,
			"signal":   cmdSignal,
			"expectbg": cmdExpectBg,
			"waitfile": cmdWaitFile,
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
	if err := checkStderr(args[1:], got, ts.ReadFile("stderr")); err != nil {
		ts.Fatalf("%v", err)
	}
}

// checkStderr applies expect's rule to what PROGRAM ARGS... (args) printed
// on stderr when it exited with code. The command of `fence run` has the
// same stderr: there only fence's own lines are checked, at most one of
// them.
func checkStderr(args []string, code int, stderr string) error {
	if code == 0 || stderr == "" || args[0] != "fence" {
		return nil
	}
	switch run, verbose := isRun(args[1:]); {
	case run && verbose:
		return nil
	case !run:
		if !OneErrorLine.MatchString(stderr) {
			return fmt.Errorf("stderr is not one line starting with \"fence: \": %q", stderr)
		}
		return nil
	}
	var own []string
	for _, l := range strings.SplitAfter(stderr, "\n") {
		if strings.HasPrefix(l, "fence: ") || strings.HasPrefix(l, "panic: ") || strings.HasPrefix(l, "goroutine ") || strings.HasPrefix(l, "Usage:") {
			own = append(own, l)
		}
	}
	if len(own) > 1 || (len(own) == 1 && !OneErrorLine.MatchString(own[0])) {
		return fmt.Errorf("fence run printed more than one line of its own, or not one starting with \"fence: \": %q", own)
	}
	return nil
}

// isRun reports whether fence's arguments run a command (`fence run ... --
// ...`), and whether with --verbose.
func isRun(args []string) (run, verbose bool) {
	for _, a := range args {
		switch {
		case a == "--":
			return run, verbose
		case a == "-v" || a == "--verbose" || a == "--verbose=true":
			verbose = true
		case a == "run":
			run = true
		}
	}
	return false, verbose
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
// "tester"; its configuration and cache directories are under dir too (no
// file of the host's is read or written).
func Env(dir string) []string {
	return append(CleanEnviron(), "FENCE_STATE_DIR="+dir, "XDG_CONFIG_HOME="+dir+"/.config", "XDG_CACHE_HOME="+dir+"/.cache",
		SystemConfigEnv+"="+filepath.Join(dir, "etc", "fence", "config.yaml"), "FENCE_HOLDER=tester")
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
