package testsig

import (
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"go.uber.org/goleak"
)

const childEnv = "FENCE_TESTSIG_CHILD"

// TestUnderNohup: a test binary started with SIGHUP ignored (nohup, as a
// benchmark harness left running in the background is) restores SIGHUP for
// its children and leaves no goroutine behind for the leak checks of the
// tests that import it.
func TestUnderNohup(t *testing.T) {
	if os.Getenv(childEnv) != "" {
		if !strings.Contains(strings.ToUpper(strings.Join(names(), ",")), "HANGUP") {
			t.Fatalf("restored %v; want SIGHUP among them", Restored)
		}
		goleak.VerifyNone(t)
		return
	}
	nohup, err := exec.LookPath("nohup")
	if err != nil {
		t.Skip("no nohup")
	}
	cmd := exec.Command(nohup, os.Args[0], "-test.run=^TestUnderNohup$", "-test.v")
	cmd.Env = append(os.Environ(), childEnv+"=1")
	cmd.Dir = t.TempDir() // nohup.out, if it writes one
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("under nohup: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "--- PASS: TestUnderNohup") {
		t.Fatalf("under nohup the child did not run the check:\n%s", out)
	}
}

func names() []string {
	var out []string
	for _, s := range Restored {
		out = append(out, s.(syscall.Signal).String())
	}
	return out
}
