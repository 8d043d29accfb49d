package fencing_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests when a goroutine outlives them: the
// scheduler ends with its last hold, and every renewal with its hold.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
