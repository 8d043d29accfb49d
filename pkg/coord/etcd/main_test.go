package etcd_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that no goroutine outlives the tests: every waiter,
// keep-alive loop and watcher ends with its context or its coordinator.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
