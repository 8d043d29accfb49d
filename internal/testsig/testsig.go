// Package testsig makes a test binary's children start with the default
// action for the signals fence forwards, whatever the test binary
// inherited. Import it for its effect in the tests that send signals:
//
//	import _ "github.com/fence-dev/fence/internal/testsig"
//
// A test started from a non-interactive shell in the background inherits
// SIGINT and SIGQUIT ignored, one started under nohup SIGHUP ignored, and
// an ignored signal stays ignored across exec: the fence processes and
// commands the tests start would then ignore what the tests send them
// (fence keeps a signal it was started with ignored, as nohup asks). For
// each such signal the test binary installs a handler that drops it, so
// that its children start with the default action, as on a terminal or in
// CI (a caught signal is reset to the default on exec). It does so only in
// a test binary running tests (its name ends in ".test"): testscript runs
// the same binary as the fence command, whose handling of an inherited
// ignored signal is under test itself.
package testsig

import (
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
)

// Restored lists the signals that were ignored when the test binary
// started and that its children now start with the default action for.
var Restored []os.Signal

func init() {
	if !strings.HasSuffix(filepath.Base(os.Args[0]), ".test") {
		return
	}
	// Nothing reads drop: package signal never blocks on a full channel, so
	// the first signal fills it and the others are dropped, with no
	// goroutine left for the tests' leak checks (goleak) to find.
	drop := make(chan os.Signal, 1)
	for _, s := range []os.Signal{syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGTERM} {
		if signal.Ignored(s) {
			signal.Notify(drop, s)
			Restored = append(Restored, s)
		}
	}
}
