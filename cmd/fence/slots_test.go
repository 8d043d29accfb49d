package main

import (
	"testing"

	st "github.com/fence-dev/fence/cmd/fence/internal/scripttest"
)

// TestRunSlots: 10 `fence run sem --slots 3` contenders on the local
// coordinator (on etcd: internal/etcdit): at most 3 inside at once, at
// least 2 seen at once, no slot used twice at once, grants first come first
// served, tokens growing; mixed --slots refused (125); limit 1 serial.
func TestRunSlots(t *testing.T) {
	st.Slots(t, st.Env(t.TempDir()))
}
