package exporter_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that the exporter's watches, servers and clients leave no
// goroutine behind.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
