package cli

import (
	"bytes"
	"context"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/fence-dev/fence/internal/exitcode"
	"github.com/fence-dev/fence/internal/faultproxy"
)

// withCommand adds a top-level command to the tree for one test.
func withCommand(t *testing.T, c *cobra.Command) {
	saved := commandGroups
	t.Cleanup(func() { commandGroups = saved })
	commandGroups = append(slices.Clone(saved), commandGroup{"test", "Test:", []func(*Factory) *cobra.Command{
		func(*Factory) *cobra.Command { return c },
	}})
}

func run(args ...string) (int, string, string) {
	var out, errOut bytes.Buffer
	code := Run(context.Background(), args, Test(&out, &errOut))
	return code, out.String(), errOut.String()
}

func TestPanicIsOneLineAnd125(t *testing.T) {
	withCommand(t, &cobra.Command{Use: "boom", RunE: func(*cobra.Command, []string) error {
		var m map[string]int
		//lint:ignore SA5000 the nil map write is the point: a real runtime panic
		m["x"]++
		return nil
	}})
	code, out, errOut := run("boom")
	if code != exitcode.Failure || out != "" || errOut != "fence: internal error: assignment to entry in nil map\n" {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}

func TestErrorIsOneLine(t *testing.T) {
	withCommand(t, &cobra.Command{Use: "multi", RunE: func(*cobra.Command, []string) error {
		return errors.New("first line\nsecond\tline\n")
	}})
	code, _, errOut := run("multi")
	if code != exitcode.Failure || errOut != "fence: first line second line\n" {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
}

func TestRegisteredCommandsJoinTheTree(t *testing.T) {
	withCommand(t, &cobra.Command{Use: "extra", Short: "an extra command", RunE: func(c *cobra.Command, _ []string) error {
		return exitcode.New(exitcode.Deadline, errors.New("deadline"))
	}})
	code, out, _ := run("--help")
	if code != 0 || !bytes.Contains([]byte(out), []byte("an extra command")) {
		t.Fatalf("help does not list the registered command: %q", out)
	}
	if code, _, errOut := run("extra"); code != exitcode.Deadline || errOut != "fence: deadline\n" {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
}

// TestEveryCommandIsInAGroup: `fence --help` shows every command under its
// group; none falls to "Additional Commands" (run did, when it registered
// itself apart from the list).
func TestEveryCommandIsInAGroup(t *testing.T) {
	code, out, _ := run("--help")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	if strings.Contains(out, "Additional Commands") {
		t.Errorf("fence --help has commands outside the groups:\n%s", out)
	}
	if i, j := strings.Index(out, "Running commands under a lock:\n  run "), strings.Index(out, "Leases:"); i < 0 || j < i {
		t.Errorf("run is not the first command of fence --help:\n%s", out)
	}
}

func TestSilentErrorPrintsNothing(t *testing.T) {
	withCommand(t, &cobra.Command{Use: "quiet", RunE: func(*cobra.Command, []string) error {
		return exitcode.Silent(exitcode.No)
	}})
	if code, _, errOut := run("quiet"); code != exitcode.No || errOut != "" {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
}

// TestTopUnreachableBounded: fence top on a coordinator that takes the
// connection and never answers gives up after topDialTimeout (2s), not the
// default dial timeout (5s); an explicit --dial-timeout is kept.
func TestTopUnreachableBounded(t *testing.T) {
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "FENCE_") {
			t.Setenv(k, "")
			os.Unsetenv(k)
		}
	}
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	silent := faultproxy.Silent(t)
	for _, tc := range []struct {
		args []string
		want string
		max  time.Duration
	}{
		{nil, "did not answer within 2s", 4 * time.Second},
		{[]string{"--dial-timeout", "2500ms"}, "did not answer within 2.5s", 4500 * time.Millisecond},
	} {
		var out, errOut bytes.Buffer
		ios := Test(&out, &errOut)
		ios.SetStdoutTTY(true)
		start := time.Now()
		code := Run(context.Background(), append(append([]string{"--endpoints", silent}, tc.args...), "top"), ios)
		elapsed := time.Since(start)
		if code != exitcode.Failure || !strings.Contains(errOut.String(), tc.want) {
			t.Errorf("%q: exit %d, stderr %q; want %q", tc.args, code, errOut.String(), tc.want)
		}
		if elapsed > tc.max {
			t.Errorf("%q: gave up after %v", tc.args, elapsed)
		}
	}
}

// TestJSONErrorNamesTheLock: under --log-format json the final error
// record carries the lock of a command of one LOCK, the locks of several,
// and nothing for a command of none.
func TestJSONErrorNamesTheLock(t *testing.T) {
	for _, c := range []struct {
		use  string
		args []string
		want string
	}{
		{"onelock LOCK", []string{"onelock", "a/b"}, `"exit_code":125,"lock":"a/b"}`},
		{"manylocks LOCK... -- COMMAND", []string{"manylocks", "a", "--", "cmd"}, `"exit_code":125,"lock":"a"}`},
		{"severallocks LOCK... -- COMMAND", []string{"severallocks", "a", "b", "--", "cmd", "x"}, `"exit_code":125,"locks":["a","b"]}`},
		{"nolock", []string{"nolock"}, `"exit_code":125}`},
	} {
		// a command of its own for each run: a command added to a second
		// tree would keep the first tree's persistent flags
		withCommand(t, &cobra.Command{Use: c.use, RunE: func(*cobra.Command, []string) error {
			return errors.New("no")
		}})
		code, _, errOut := run(append([]string{"--log-format", "json", "--state-dir", t.TempDir()}, c.args...)...)
		if code != exitcode.Failure || !strings.HasSuffix(errOut, c.want+"\n") || strings.Count(errOut, "\n") != 1 {
			t.Errorf("%v: exit %d, stderr %q; want one line ending %s", c.args, code, errOut, c.want)
		}
	}
}
