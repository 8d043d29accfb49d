package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/fence-dev/fence/test/e2e/internal/oplog"
)

// rec builds a logged operation: kind, token, from (incr), call and return
// times, result ("" for a process killed before it returned), read value
// and fence.
func rec(id string, kind string, tok uint64, from int64, call, ret int64, result string, value int64, fence uint64) oplog.Op {
	c := oplog.Record{ID: id, Phase: oplog.Call, Kind: kind, Token: tok, T: call}
	if kind == oplog.Incr {
		c.From, c.To = from, from+1
	}
	o := oplog.Op{Call: c}
	if result != "" {
		r := c
		r.Phase, r.T, r.Result, r.Value, r.Fence = oplog.Ret, ret, result, value, fence
		o.Ret = &r
	}
	return o
}

// TestCheckerCatchesAnomalies feeds the checks of the nemesis test
// histories with and without the anomalies they exist to find: they must
// pass the good ones and flag each bad one.
func TestCheckerCatchesAnomalies(t *testing.T) {
	// Holder 5 claims, reads 0, increments twice; holder 7 claims, reads
	// 2, increments; stale holder 5 is refused.
	good := []oplog.Op{
		rec("a1", oplog.Claim, 5, 0, 10, 11, oplog.OK, 0, 0),
		rec("a2", oplog.Read, 5, 0, 12, 13, oplog.OK, 0, 5),
		rec("a3", oplog.Incr, 5, 0, 14, 15, oplog.OK, 0, 0),
		rec("a4", oplog.Incr, 5, 1, 16, 17, oplog.OK, 0, 0),
		rec("b1", oplog.Claim, 7, 0, 20, 21, oplog.OK, 0, 0),
		rec("b2", oplog.Read, 7, 0, 22, 23, oplog.OK, 2, 7),
		rec("a5", oplog.Incr, 5, 2, 24, 25, oplog.Stale, 0, 7),
		rec("b3", oplog.Incr, 7, 2, 26, 27, oplog.OK, 0, 0),
		rec("b4", oplog.Incr, 7, 3, 28, 0, "", 0, 0), // killed: it took effect
		rec("b5", oplog.Incr, 7, 4, 29, 0, "", 0, 0), // killed before it was sent
	}
	final := cState{Value: 4, Fence: 7}
	h := buildHistory(good, final, 100)
	if h.accepted != 5 || h.refused != 1 || h.unknown != 2 || h.incrOK != 3 || h.claims != 2 || h.reads != 3 {
		t.Fatalf("counts: accepted %d refused %d unknown %d incrOK %d claims %d reads %d", h.accepted, h.refused, h.unknown, h.incrOK, h.claims, h.reads)
	}
	for _, atomic := range []bool{true, false} {
		if why := linearizable(h, counterModel(atomic), 10*time.Second, t.TempDir()); why != "" {
			t.Fatalf("good history, atomic=%v: %s", atomic, why)
		}
	}
	if a := tokenOrderAnomalies(h); len(a) != 0 {
		t.Fatalf("good history: %v", a)
	}
	if n, a := counterAnomalies(h, final); n != 1 || len(a) != 0 {
		t.Fatalf("good history: %d took effect, %v", n, a)
	}

	// A lost update: holder 7 reads before stale holder 5's write is
	// accepted (no claim), then overwrites it. The store behaved (a fenced
	// register), the counter did not.
	lost := []oplog.Op{
		rec("a1", oplog.Claim, 5, 0, 10, 11, oplog.OK, 0, 0),
		rec("a2", oplog.Read, 5, 0, 12, 13, oplog.OK, 0, 5),
		rec("b1", oplog.Read, 7, 0, 20, 21, oplog.OK, 0, 5),
		rec("a3", oplog.Incr, 5, 0, 22, 23, oplog.OK, 0, 0),
		rec("b2", oplog.Incr, 7, 0, 24, 25, oplog.OK, 0, 0),
	}
	final = cState{Value: 1, Fence: 7}
	h = buildHistory(lost, final, 100)
	if why := linearizable(h, counterModel(false), 10*time.Second, t.TempDir()); why != "" {
		t.Fatalf("lost update, register model: %s", why)
	}
	if why := linearizable(h, counterModel(true), 10*time.Second, t.TempDir()); !strings.Contains(why, "not linearizable") {
		t.Fatalf("lost update passed the atomic counter model: %q", why)
	}
	if _, a := counterAnomalies(h, final); len(a) != 1 || !strings.Contains(a[0], "lost update") {
		t.Fatalf("lost update: %v", a)
	}

	// A stale write accepted: token 5 after token 7 returned.
	stale := []oplog.Op{
		rec("b1", oplog.Claim, 7, 0, 10, 11, oplog.OK, 0, 0),
		rec("b2", oplog.Incr, 7, 0, 12, 13, oplog.OK, 0, 0),
		rec("a1", oplog.Incr, 5, 1, 14, 15, oplog.OK, 0, 0),
	}
	final = cState{Value: 2, Fence: 5}
	h = buildHistory(stale, final, 100)
	for _, atomic := range []bool{true, false} {
		if why := linearizable(h, counterModel(atomic), 10*time.Second, t.TempDir()); !strings.Contains(why, "not linearizable") {
			t.Fatalf("accepted stale write passed, atomic=%v: %q", atomic, why)
		}
	}
	if a := tokenOrderAnomalies(h); len(a) != 1 || !strings.Contains(a[0], "t5") {
		t.Fatalf("accepted stale write: %v", a)
	}

	// A refused write that should have been accepted, and a final value
	// nothing explains.
	h = buildHistory([]oplog.Op{rec("a1", oplog.Incr, 5, 0, 10, 11, oplog.Stale, 0, 0)}, cState{Value: 1, Fence: 5}, 100)
	if why := linearizable(h, counterModel(false), 10*time.Second, t.TempDir()); why == "" {
		t.Fatal("a wrongly refused write passed")
	}
	if _, a := counterAnomalies(h, cState{Value: 1, Fence: 5}); len(a) != 1 || !strings.Contains(a[0], "written by no increment") {
		t.Fatalf("unexplained final value: %v", a)
	}
}

// TestPairRejectsBadLogs: the merge refuses logs it cannot trust.
func TestPairRejectsBadLogs(t *testing.T) {
	call := oplog.Record{ID: "1.1", Phase: oplog.Call, Kind: oplog.Incr, Token: 3, T: 10}
	ret := call
	ret.Phase, ret.T, ret.Result = oplog.Ret, 12, oplog.OK
	for name, recs := range map[string][]oplog.Record{
		"ret without call": {ret},
		"two calls":        {call, call},
		"two returns":      {call, ret, ret},
		"other token":      {call, func() oplog.Record { r := ret; r.Token = 4; return r }()},
		"back in time":     {call, func() oplog.Record { r := ret; r.T = 9; return r }()},
	} {
		if _, err := oplog.Pair(recs); err == nil {
			t.Errorf("%s: Pair accepted it", name)
		}
	}
	ops, err := oplog.Pair([]oplog.Record{ret, call})
	if err != nil || len(ops) != 1 || ops[0].Unknown() {
		t.Fatalf("Pair = %+v, %v", ops, err)
	}
}
