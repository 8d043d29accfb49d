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

// TestShardSetLookWaiting: with no command, one starts with a non-empty
// set once the member is settled or the set has been unchanged for the
// settle time; else the wait is what is left of it (at least a
// millisecond), and with no shard there is nothing to wait for but a
// change (0: no timer; it was a millisecond once the settle time passed,
// a look every millisecond while the member held nothing).
func TestShardSetLookWaiting(t *testing.T) {
	const settle = time.Second
	t0 := time.Unix(1000, 0)
	for _, c := range []struct {
		n         int
		settled   bool
		unchanged time.Duration
		reason    string
		wait      time.Duration
	}{
		{0, false, 0, "", 0},
		{0, true, 0, "", 0}, // settled on no shard: nothing to run
		{0, false, 5 * time.Second, "", 0},
		{3, true, 0, "set none → 0-2", 0}, // the whole target: at once
		{3, false, 0, "", settle},         // part of it: wait for the rest
		{3, false, 400 * time.Millisecond, "", 600 * time.Millisecond},
		{3, false, settle, "set none → 0-2", 0}, // unchanged for the settle time
		{3, false, settle - time.Microsecond, "", time.Millisecond},
	} {
		live := make([]int, c.n)
		for i := range live {
			live[i] = i
		}
		w := shardSet{set: slices.Clone(live), since: t0}
		reason, wait := w.look(t0.Add(c.unchanged), nil, nil, live, c.settled, settle)
		if reason != c.reason || wait != c.wait {
			t.Errorf("look(no command, %d shards, settled %v, unchanged %v) = %q, %v; want %q, %v", c.n, c.settled, c.unchanged, reason, wait, c.reason, c.wait)
		}
	}
}

// TestShardSetSince: the time unchanged restarts with every other set, and
// is kept from one look to the next while the set is the same.
func TestShardSetSince(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var w shardSet
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
		now := t0.Add(c.at)
		w.look(now, nil, nil, c.set, false, time.Hour)
		if got := now.Sub(w.since); got != c.want {
			t.Errorf("%d: look(%v) at %v: unchanged %v, want %v", i, c.set, c.at, got, c.want)
		}
	}
}

// TestStopReasons: shards of the command's set given up (moved away,
// revoked) restart it, each reason once (the member's causes name their
// shard: TestMovedCauseNamesShard in package shards); a lost lease is the
// Runner's to stop; a member that left says so once for all its shards.
func TestStopReasons(t *testing.T) {
	moved := func(n int) string { return fmt.Sprintf(`shard %d of group "g": shard moved to another member`, n) }
	revoked := `shard 2 of group "g": revoked: stop requested`
	for _, c := range []struct {
		name  string
		facts []shardFact
		want  []string
	}{
		{"all live", []shardFact{{}, {}}, nil},
		{"one moved", []shardFact{{}, {ended: true, cause: moved(1)}}, []string{moved(1)}},
		{"two moved", []shardFact{{ended: true, cause: moved(0)}, {ended: true, cause: moved(1)}}, []string{moved(0), moved(1)}},
		{"revoked names its shard", []shardFact{{ended: true, cause: revoked}}, []string{revoked}},
		{"lost", []shardFact{{ended: true, lost: true, cause: "lease lost"}}, nil},
		{"left", []shardFact{{ended: true, cause: "member left the group"}, {ended: true, cause: "member left the group"}},
			[]string{"member left the group"}},
	} {
		if got := stopReasons(c.facts); !slices.Equal(got, c.want) {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}

// TestShardSetLookRunning: a running command restarts at once for a shard
// given up; for a grown or shrunk set when the member settles or once the
// set has been unchanged for a settle time (since its last change: a set
// that changed again waits again); the wait is what is left of it (0:
// until a change). The view is one for the runs and the waiting between
// them: a set that restarted the command, unchanged for the settle time,
// starts it again at once.
func TestShardSetLookRunning(t *testing.T) {
	const settle = time.Second
	t0 := time.Unix(1000, 0)
	cmd := []int{0, 1}
	type step struct {
		at      time.Duration
		why     []string
		live    []int
		settled bool
		reason  string
		wait    time.Duration
	}
	for _, c := range []struct {
		name  string
		steps []step
	}{
		{"unchanged", []step{{0, nil, cmd, true, "", 0}, {5 * time.Second, nil, cmd, false, "", 0}}},
		{"given up", []step{{0, []string{"shard 1: moved"}, []int{0}, false, "shard 1: moved", 0}}},
		{"two given up", []step{{0, []string{"a", "b"}, cmd, false, "a; b", 0}}},
		{"grown, then settled", []step{
			{0, nil, []int{0, 1, 2}, false, "", settle},
			{300 * time.Millisecond, nil, []int{0, 1, 2, 3}, false, "", settle}, // changed again: the wait starts again
			{500 * time.Millisecond, nil, []int{0, 1, 2, 3}, true, "set 0-1 → 0-3", 0},
		}},
		{"grown, a settle time later", []step{
			{0, nil, []int{0, 1, 2}, false, "", settle},
			{999 * time.Millisecond, nil, []int{0, 1, 2}, false, "", time.Millisecond},
			{settle, nil, []int{0, 1, 2}, false, "set 0-1 → 0-2", 0},
		}},
		{"grown twice, a settle time after the last change", []step{
			{0, nil, []int{0, 1, 2}, false, "", settle},
			{600 * time.Millisecond, nil, []int{0, 1, 2, 3}, false, "", settle},
			{settle, nil, []int{0, 1, 2, 3}, false, "", 600 * time.Millisecond},
			{1600 * time.Millisecond, nil, []int{0, 1, 2, 3}, false, "set 0-1 → 0-3", 0},
		}},
		{"lost one, settled", []step{{0, nil, []int{1}, true, "set 0-1 → 1", 0}}},
		{"lost all", []step{{0, nil, nil, false, "", settle}, {settle, nil, nil, false, "set 0-1 → none", 0}}},
	} {
		var w shardSet
		for i, s := range c.steps {
			reason, wait := w.look(t0.Add(s.at), s.why, cmd, s.live, s.settled, settle)
			if reason != s.reason || wait != s.wait {
				t.Errorf("%s, step %d: look = %q, wait %v; want %q, %v", c.name, i, reason, wait, s.reason, s.wait)
			}
		}
		if c.name == "grown, a settle time later" {
			// The waiting step after that restart, on the same view.
			if reason, wait := w.look(t0.Add(settle), nil, nil, []int{0, 1, 2}, false, settle); reason != "set none → 0-2" || wait != 0 {
				t.Errorf("%s, then no command: look = %q, wait %v; want at once", c.name, reason, wait)
			}
		}
	}
}

// TestShardAfter: what follows each end of a run: a restart's reason, or
// (none) fence's code and error.
func TestShardAfter(t *testing.T) {
	changed := fmt.Errorf("%w: set 0-1 → 0-3", errSetChanged)
	lost := fmt.Errorf("lease of g/shard/1 lost: %w", coord.ErrLeaseLost)
	left := errors.New(`member "m" of group "g": lease lost`)
	exit3 := errors.New("exit 3")
	const stopping = "interrupted by SIGTERM while the command was stopped to restart it"
	for _, c := range []struct {
		name   string
		e      shardRunEnd
		reason string
		code   int
		err    string
	}{
		{"exited 0", shardRunEnd{code: 0}, "", 0, ""},
		{"exited 3", shardRunEnd{code: 3, err: exit3}, "", 3, "exit 3"},
		{"set changed", shardRunEnd{code: 143, stopped: changed}, changed.Error(), 0, ""},
		{"set changed, exited 0 meanwhile", shardRunEnd{code: 0, stopped: changed}, changed.Error(), 0, ""},
		{"a shard's lease lost", shardRunEnd{code: exitcode.LeaseLost, err: lost}, "lost a lease: " + lost.Error(), 0, ""},
		{"member left", shardRunEnd{code: exitcode.LeaseLost, err: lost, left: left}, "", exitcode.LeaseLost, left.Error()},
		{"member left, command stopped for a change", shardRunEnd{code: 143, stopped: changed, left: left}, "", exitcode.LeaseLost, left.Error()},
		{"member left, the command had exited 0", shardRunEnd{code: 0, left: left}, "", 0, ""},
		{"signalled", shardRunEnd{code: 143, stopped: changed, signalled: true}, "", 143, ""},
		{"signalled, member left", shardRunEnd{code: 143, left: left, signalled: true}, "", 143, ""},
		{"a signal while stopped for a change", shardRunEnd{code: 1, stopped: changed, late: 15}, "", 143, stopping},
		{"a signal after a lease was lost", shardRunEnd{code: exitcode.LeaseLost, err: lost, late: 15}, "", 143, stopping},
		{"a signal after it exited on its own", shardRunEnd{code: 0, late: 15}, "", 0, ""},
		{"a signal as the member left", shardRunEnd{code: exitcode.LeaseLost, left: left, late: 15}, "", exitcode.LeaseLost, left.Error()},
		{"signalled, and again late", shardRunEnd{code: 143, stopped: changed, signalled: true, late: 15}, "", 143, ""},
	} {
		reason, code, err := shardAfter(c.e)
		if got := fmt.Sprint(err); reason != c.reason || code != c.code || (c.err == "") != (err == nil) || err != nil && got != c.err {
			t.Errorf("%s: shardAfter = %q, %d, %v; want %q, %d, %q", c.name, reason, code, err, c.reason, c.code, c.err)
		}
	}
}
