package cli

import (
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/fence-dev/fence/internal/exitcode"
	"github.com/fence-dev/fence/internal/output"
)

// TestRequestsEnv: every spelling of -o env before "--" asks for the failing
// snippet; nothing else does.
func TestRequestsEnv(t *testing.T) {
	for _, c := range []struct {
		args string
		want bool
	}{
		{"acquire L -o env", true},
		{"acquire L -oenv", true},
		{"acquire L -o=env", true},
		{"acquire L -no env", true},
		{"acquire L -noenv", true},
		{"acquire L -vno=env", true},
		{"acquire L --output env", true},
		{"acquire L --output=env", true},
		{"acquire L --bogus -o env", true},
		{"--endpoints x acquire L -o env -n", true},
		{"aquire L -o env", true},
		{"acquire L -o json -o env", true},
		{"acquire L", false},
		{"acquire L -n", false},
		{"acquire L -o json", false},
		{"acquire L -o", false},
		{"acquire L -o envx", false},
		{"acquire L --output=json env", false},
		{"acquire L --outputs env", false},
		{"acquire env", false},
		{"run L -- sh -c x -o env", false},
		{"acquire L -- -o env", false},
	} {
		if got := requestsEnv(strings.Fields(c.args)); got != c.want {
			t.Errorf("requestsEnv(%s) = %v, want %v", c.args, got, c.want)
		}
	}
}

// TestEnvFailureAfterPanic: a panic in a command run with -o env still
// leaves the failing snippet on stdout (and one line on stderr).
func TestEnvFailureAfterPanic(t *testing.T) {
	var format output.Format
	boom := &cobra.Command{Use: "boom", RunE: func(*cobra.Command, []string) error {
		var m map[string]int
		//lint:ignore SA5000 the nil map write is the point: a real runtime panic
		m["x"]++
		return nil
	}}
	formatFlag(boom, &format, output.Text, output.Env)
	withCommand(t, boom)
	code, out, errOut := run("boom", "-o", "env")
	if code != exitcode.Failure || out != "(exit 125)\n" || errOut != "fence: internal error: assignment to entry in nil map\n" {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}
