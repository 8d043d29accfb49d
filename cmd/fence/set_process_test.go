package main

import (
	"testing"
	"time"

	st "github.com/fence-dev/fence/cmd/fence/internal/scripttest"
)

// TestRunSetNoDeadlock: `fence run a b` and `fence run b a`, 300 times
// each in two loops, waiting without limit: no deadlock, no overlap (on
// etcd: internal/etcdit). The same two loops nested (`fence run a -- fence
// run b` against `fence run b -- fence run a`) deadlock within a few rounds.
// A deadlock never ends: the 3 minutes leave room for a loaded 2-core host,
// where the 600 runs took up to 59 s.
func TestRunSetNoDeadlock(t *testing.T) {
	took := st.SetNoDeadlock(t, st.Env(t.TempDir()), 300, 3*time.Minute)
	t.Logf("2 x 300 runs of a set of 2 locks in opposite orders: %v", took)
}

// TestRunSetContenders: 20 contenders over random subsets of 5 locks: no two
// commands whose sets intersect run at once, every contender finishes.
func TestRunSetContenders(t *testing.T) {
	st.SetContenders(t, st.Env(t.TempDir()), 20, 3, 60*time.Second)
}
