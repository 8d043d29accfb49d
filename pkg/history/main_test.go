package history_test

import (
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/fence-dev/fence/internal/supervise"
)

// TestMain runs the tests, checking that the recorders, stores and
// coordinators leave no goroutine behind; started as fence run's watchdog
// (by TestRunLeavesEvents), it is the watchdog.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == supervise.WatchdogArg {
		os.Exit(supervise.WatchdogMain(os.Args[1:], nil))
	}
	goleak.VerifyTestMain(m)
}
