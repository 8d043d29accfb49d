package supervise

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/fence-dev/fence/internal/exitcode"
	"github.com/fence-dev/fence/pkg/coord"
)

// TestShardStartDue: the command starts with a non-empty set once the
// member is settled or the set has been unchanged for the settle time;
// else the wait is what is left of it (at least a millisecond).
func TestShardStartDue(t *testing.T) {
	const settle = time.Second
	for _, c := range []struct {
		n         int
		settled   bool
		unchanged time.Duration
		start     bool
		wait      time.Duration
	}{
		{0, false, 0, false, settle},
		{0, true, 0, false, settle}, // settled on no shard: nothing to run
		{0, false, 5 * time.Second, false, time.Millisecond},
		{3, true, 0, true, 0},        // the whole target: at once
		{3, false, 0, false, settle}, // part of it: wait for the rest
		{3, false, 400 * time.Millisecond, false, 600 * time.Millisecond},
		{3, false, settle, true, 0}, // unchanged for the settle time
		{3, false, settle - time.Microsecond, false, time.Millisecond},
	} {
		start, wait := shardStartDue(c.n, c.settled, c.unchanged, settle)
		if start != c.start || wait != c.wait {
			t.Errorf("shardStartDue(%d shards, settled %v, unchanged %v) = %v, %v; want %v, %v", c.n, c.settled, c.unchanged, start, wait, c.start, c.wait)
		}
	}
}

// TestShardWaitSee: the time unchanged restarts with every other set, and
// is kept from one start to the next while the set is the same.
func TestShardWaitSee(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var w shardWait
	for i, c := range []struct {
		set  []int
		at   time.Duration
		want time.Duration
	}{
		{[]int{}, 0, 0},
		{[]int{}, 300 * time.Millisecond, 300 * time.Millisecond},
		{[]int{1, 2}, 500 * time.Millisecond, 0},
		{[]int{1, 2}, 900 * time.Millisecond, 400 * time.Millisecond},
		{[]int{1}, time.Second, 0},
		{[]int{1, 2}, 2 * time.Second, 0},
		{[]int{1, 2}, 3 * time.Second, time.Second},
	} {
		if got := w.see(c.set, t0.Add(c.at)); got != c.want {
			t.Errorf("%d: see(%v) at %v = %v, want %v", i, c.set, c.at, got, c.want)
		}
	}
}

// TestStopReasons: shards of the command's set given up (moved away,
// revoked) restart it, each reason once and naming its shard; a lost
// lease is the Runner's to stop; a member that left says so alone.
func TestStopReasons(t *testing.T) {
	moved := "shard moved to another member"
	revoked := `shard 2 of group "g": revoked: stop requested`
	for _, c := range []struct {
		name  string
		facts []shardFact
		left  bool
		want  []string
	}{
		{"all live", []shardFact{{number: 0}, {number: 1}}, false, nil},
		{"one moved", []shardFact{{number: 0}, {number: 1, ended: true, cause: moved}}, false, []string{"shard 1: " + moved}},
		{"two moved", []shardFact{{number: 0, ended: true, cause: moved}, {number: 1, ended: true, cause: moved}}, false,
			[]string{"shard 0: " + moved, "shard 1: " + moved}},
		{"revoked names its shard", []shardFact{{number: 2, ended: true, cause: revoked}}, false, []string{revoked}},
		{"lost", []shardFact{{number: 0, ended: true, lost: true, cause: "lease lost"}}, false, nil},
		{"left", []shardFact{{number: 0, ended: true, cause: "member left the group"}, {number: 1, ended: true, cause: "member left the group"}}, true,
			[]string{"member left the group"}},
	} {
		if got := stopReasons(c.facts, c.left); !slices.Equal(got, c.want) {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}

// TestShardSetWatchCheck: a running command restarts at once for a shard
// given up; for a grown or shrunk set when the member settles or a settle
// time after the first difference; the timer is armed at that first one.
func TestShardSetWatchCheck(t *testing.T) {
	const settle = time.Second
	t0 := time.Unix(1000, 0)
	cmd := []int{0, 1}
	type step struct {
		at      time.Duration
		why     []string
		live    []int
		settled bool
		reason  string
		arm     bool
	}
	for _, c := range []struct {
		name  string
		steps []step
	}{
		{"unchanged", []step{{0, nil, cmd, true, "", false}, {5 * time.Second, nil, cmd, false, "", false}}},
		{"given up", []step{{0, []string{"shard 1: moved"}, []int{0}, false, "shard 1: moved", true}}},
		{"two given up", []step{{0, []string{"a", "b"}, cmd, false, "a; b", false}}},
		{"grown, then settled", []step{
			{0, nil, []int{0, 1, 2}, false, "", true},
			{300 * time.Millisecond, nil, []int{0, 1, 2, 3}, false, "", false}, // armed once
			{500 * time.Millisecond, nil, []int{0, 1, 2, 3}, true, "set 0-1 → 0-3", false},
		}},
		{"grown, a settle time later", []step{
			{0, nil, []int{0, 1, 2}, false, "", true},
			{999 * time.Millisecond, nil, []int{0, 1, 2}, false, "", false},
			{settle, nil, []int{0, 1, 2}, false, "set 0-1 → 0-2", false},
		}},
		{"lost one, settled", []step{{0, nil, []int{1}, true, "set 0-1 → 1", true}}},
		{"lost all", []step{{0, nil, nil, false, "", true}, {settle, nil, nil, false, "set 0-1 → none", false}}},
	} {
		var w shardSetWatch
		for i, s := range c.steps {
			reason, arm := w.check(t0.Add(s.at), s.why, cmd, s.live, s.settled, settle)
			if reason != s.reason || arm != s.arm {
				t.Errorf("%s, step %d: check = %q, arm %v; want %q, %v", c.name, i, reason, arm, s.reason, s.arm)
			}
		}
	}
}

// TestShardAfter: what follows each end of a run.
func TestShardAfter(t *testing.T) {
	changed := fmt.Errorf("%w: set 0-1 → 0-3", errSetChanged)
	lost := fmt.Errorf("lease of g/shard/1 lost: %w", coord.ErrLeaseLost)
	for _, c := range []struct {
		name   string
		e      shardRunEnd
		next   shardNext
		reason string
	}{
		{"exited 0", shardRunEnd{code: 0}, shardReturn, ""},
		{"exited 3", shardRunEnd{code: 3, err: errors.New("exit 3")}, shardReturn, ""},
		{"set changed", shardRunEnd{code: 143, stopped: changed}, shardRestart, changed.Error()},
		{"set changed, exited 0 meanwhile", shardRunEnd{code: 0, stopped: changed}, shardRestart, changed.Error()},
		{"a shard's lease lost", shardRunEnd{code: exitcode.LeaseLost, err: lost}, shardRestartLost, "lost a lease: " + lost.Error()},
		{"member left", shardRunEnd{code: exitcode.LeaseLost, err: lost, left: true}, shardLeft, ""},
		{"member left, command stopped for a change", shardRunEnd{code: 143, stopped: changed, left: true}, shardLeft, ""},
		{"member left, the command had exited 0", shardRunEnd{code: 0, left: true}, shardReturn, ""},
		{"signalled", shardRunEnd{code: 143, stopped: changed, signalled: true}, shardReturn, ""},
		{"signalled, member left", shardRunEnd{code: 143, left: true, signalled: true}, shardReturn, ""},
		{"a signal while stopped for a change", shardRunEnd{code: 1, stopped: changed, late: 15}, shardInterrupted, ""},
		{"a signal after a lease was lost", shardRunEnd{code: exitcode.LeaseLost, err: lost, late: 15}, shardInterrupted, ""},
		{"a signal after it exited on its own", shardRunEnd{code: 0, late: 15}, shardReturn, ""},
		{"a signal as the member left", shardRunEnd{code: exitcode.LeaseLost, left: true, late: 15}, shardLeft, ""},
		{"signalled, and again late", shardRunEnd{code: 143, stopped: changed, signalled: true, late: 15}, shardReturn, ""},
	} {
		next, reason := shardAfter(c.e)
		if next != c.next || reason != c.reason {
			t.Errorf("%s: shardAfter = %v, %q; want %v, %q", c.name, next, reason, c.next, c.reason)
		}
	}
}
