package cli

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/spf13/cobra"

	"github.com/fence-dev/fence/internal/exitcode"
)

// withCommand registers a top-level command for one test.
func withCommand(t *testing.T, c *cobra.Command) {
	saved := commandFactories
	t.Cleanup(func() { commandFactories = saved })
	registerCommand(func(*Factory) *cobra.Command { return c })
}

func run(args ...string) (int, string, string) {
	var out, errOut bytes.Buffer
	code := Run(context.Background(), args, Test(&out, &errOut))
	return code, out.String(), errOut.String()
}

func TestPanicIsOneLineAnd125(t *testing.T) {
	withCommand(t, &cobra.Command{Use: "boom", RunE: func(*cobra.Command, []string) error {
		var m map[string]int
		m["x"]++ // a real runtime panic
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

func TestSilentErrorPrintsNothing(t *testing.T) {
	withCommand(t, &cobra.Command{Use: "quiet", RunE: func(*cobra.Command, []string) error {
		return exitcode.Silent(exitcode.No)
	}})
	if code, _, errOut := run("quiet"); code != exitcode.No || errOut != "" {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
}
