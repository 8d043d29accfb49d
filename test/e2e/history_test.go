package e2e

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/fence-dev/fence/internal/clock"
	"github.com/fence-dev/fence/test/e2e/internal/oplog"
)

// The fenced counter is one row (value, fence) of a PostgreSQL table. Its
// holders (e2ehelper incr, one per `fence run`) use three operations, all
// through sqlguard's fenced statements:
//
//	claim(tok):         UPDATE counter SET holder = …, fence = tok WHERE id = 1 AND fence <= tok
//	read:               SELECT value, fence FROM counter WHERE id = 1
//	incr(tok, v, v+1):  UPDATE counter SET value = v+1, fence = tok WHERE id = 1 AND fence <= tok
//
// A holder claims, reads v (and gives up if the fence is not its token),
// then increments from the value it knows: v, then its own last write.
//
// Why no increment is lost. The store accepts a write exactly when its
// token is at least the stored fence (sqlguard; the database evaluates the
// condition on the row it changes). Tokens are unique per holder. Take an
// accepted incr(tok, v, v+1) of holder H. H's claim was accepted before it,
// so from then on the fence is at least tok; when the incr is accepted the
// fence is at most tok, so it is exactly tok, and it never exceeded tok in
// between (a fence never decreases). Hence every write accepted between H's
// claim and this incr carried token tok, i.e. was H's own, and the value is
// the one H read or last wrote: v. So each accepted increment adds exactly
// one to the value it replaces. Without the claim this fails: a stale holder
// (smaller token) could write between H's read and H's first write, which
// would then overwrite it. An operation whose outcome is unknown (the
// process was killed, the statement failed) took effect or not, and when it
// did, the same argument holds for it. The nemesis's stale-write fault
// aims at that window (a stale holder writes while its successor sits
// between its read and its first write): with the claim taken out of
// e2ehelper, every such fault shows up as lost updates in checks (i) and
// (iii).
//
// The checks: (i) the history is linearizable against counterModel(true),
// the sequential specification of an atomic fenced counter, in which an
// accepted increment must start from the current value; and against
// counterModel(false), the plain fenced register (the store's contract
// alone), to tell a store fault from a protocol fault; (ii) no write with a
// token smaller than one already accepted (returned before it was called)
// was accepted; (iii) the final value equals the number of increments that
// took effect: each value 1..final was written by exactly one accepted
// increment, or only by increments of unknown outcome, no two accepted
// increments wrote the same value, and none wrote a value above the final.

// cInput is an operation on the counter.
type cInput struct {
	Kind     string // oplog.Claim, oplog.Read, oplog.Incr
	Token    uint64
	From, To int64 // Incr
}

// cOutput is its outcome.
type cOutput struct {
	Unknown bool
	Result  string // oplog.OK or oplog.Stale
	Value   int64  // Read
	Fence   uint64 // Read
}

// cState is the row.
type cState struct {
	Value int64
	Fence uint64
}

// counterModel is the sequential specification of the fenced counter. A
// write (claim or incr) is accepted exactly when its token is at least the
// fence, and then sets the fence to its token (and, for incr, the value to
// To); a refused write changes nothing; a read returns the row. With
// atomic, an accepted incr must also start from the current value (From ==
// value): increments are atomic read-modify-writes. An operation with an
// unknown outcome may or may not have taken effect.
func counterModel(atomic bool) porcupine.Model {
	nm := porcupine.NondeterministicModel{
		Init: func() []any { return []any{cState{}} },
		Step: func(st, in, out any) []any {
			s, i, o := st.(cState), in.(cInput), out.(cOutput)
			if i.Kind == oplog.Read {
				if o.Unknown || (o.Value == s.Value && o.Fence == s.Fence) {
					return []any{s}
				}
				return nil
			}
			accept := i.Token >= s.Fence
			next := cState{Value: s.Value, Fence: i.Token}
			if i.Kind == oplog.Incr {
				next.Value = i.To
				if atomic && s.Value != i.From {
					accept = false // possible only as a lost update: not allowed
				}
			}
			switch {
			case o.Unknown && accept:
				return []any{s, next}
			case o.Unknown:
				return []any{s}
			case o.Result == oplog.OK && accept:
				return []any{next}
			case o.Result == oplog.Stale && i.Token < s.Fence:
				return []any{s}
			}
			return nil
		},
		DescribeOperation: func(in, out any) string {
			i, o := in.(cInput), out.(cOutput)
			res := o.Result
			switch {
			case o.Unknown:
				res = "?"
			case i.Kind == oplog.Read:
				res = fmt.Sprintf("%d@%d", o.Value, o.Fence)
			}
			switch i.Kind {
			case oplog.Incr:
				return fmt.Sprintf("incr(t%d, %d→%d) → %s", i.Token, i.From, i.To, res)
			case oplog.Claim:
				return fmt.Sprintf("claim(t%d) → %s", i.Token, res)
			}
			return "read → " + res
		},
		DescribeState: func(st any) string {
			s := st.(cState)
			return fmt.Sprintf("%d@%d", s.Value, s.Fence)
		},
	}
	return nm.ToModel()
}

// history is a checked-out history of the counter.
type history struct {
	ops []porcupine.Operation
	// Counts.
	accepted, refused, unknown     int // writes accepted, writes refused; operations of unknown outcome
	incrOK, incrStale, incrUnknown int
	claims, reads                  int
}

// buildHistory turns paired log operations into porcupine operations, and
// appends the final read (value, fence at time final, after every process
// and connection had ended). Operations of unknown outcome are given a
// return time just before the final read: whatever took effect did so
// before it. Reads that failed say nothing and are left out (counted as
// unknown).
func buildHistory(ops []oplog.Op, final cState, finalT int64) history {
	var h history
	for _, o := range ops {
		in := cInput{Kind: o.Call.Kind, Token: o.Call.Token, From: o.Call.From, To: o.Call.To}
		po := porcupine.Operation{ClientId: o.Call.Client, Input: in, Call: o.Call.T, Return: finalT - 1, Metadata: o.Call.ID}
		if o.Unknown() {
			h.unknown++
			if in.Kind == oplog.Read {
				continue
			}
			po.Output = cOutput{Unknown: true}
			if in.Kind == oplog.Incr {
				h.incrUnknown++
			}
		} else {
			po.Return = o.Ret.T
			po.Output = cOutput{Result: o.Ret.Result, Value: o.Ret.Value, Fence: o.Ret.Fence}
		}
		switch in.Kind {
		case oplog.Read:
			h.reads++
		case oplog.Claim:
			h.claims++
		}
		if in.Kind != oplog.Read && !o.Unknown() {
			if o.Ret.Result == oplog.OK {
				h.accepted++
				if in.Kind == oplog.Incr {
					h.incrOK++
				}
			} else {
				h.refused++
				if in.Kind == oplog.Incr {
					h.incrStale++
				}
			}
		}
		h.ops = append(h.ops, po)
	}
	h.ops = append(h.ops, porcupine.Operation{ClientId: 0, Input: cInput{Kind: oplog.Read},
		Output: cOutput{Result: oplog.OK, Value: final.Value, Fence: final.Fence}, Call: finalT, Return: finalT, Metadata: "final read"})
	h.reads++
	return h
}

// linearizable checks h against model. It returns "" when the history is
// linearizable, else why not, with the path of a visualization written in
// dir.
func linearizable(h history, model porcupine.Model, timeout time.Duration, dir string) string {
	res, info := porcupine.CheckOperationsVerbose(model, h.ops, timeout)
	if res == porcupine.Ok {
		return ""
	}
	path := "(not written)"
	if f, err := os.CreateTemp(dir, "fence-e2e-history-*.html"); err == nil {
		if porcupine.Visualize(model, info, f) == nil {
			path = f.Name()
		}
		f.Close()
	}
	if res == porcupine.Unknown {
		return "the check did not finish within " + timeout.String() + "; visualization: " + path
	}
	return "not linearizable; visualization: " + path
}

func opString(o porcupine.Operation) string {
	i, out := o.Input.(cInput), o.Output.(cOutput)
	m := counterModel(true)
	return fmt.Sprintf("%v [%s, call %d, return %d]", m.DescribeOperation(i, out), o.Metadata, o.Call, o.Return)
}

// tokenOrderAnomalies is check (ii): an accepted write whose call came after
// the return of an accepted write with a larger token.
func tokenOrderAnomalies(h history) []string {
	var acc []porcupine.Operation
	for _, o := range h.ops {
		i, out := o.Input.(cInput), o.Output.(cOutput)
		if i.Kind != oplog.Read && !out.Unknown && out.Result == oplog.OK {
			acc = append(acc, o)
		}
	}
	byReturn := slices.Clone(acc)
	sort.Slice(byReturn, func(a, b int) bool { return byReturn[a].Return < byReturn[b].Return })
	sort.Slice(acc, func(a, b int) bool { return acc[a].Call < acc[b].Call })
	var out []string
	var maxOp *porcupine.Operation
	j := 0
	for _, b := range acc {
		for ; j < len(byReturn) && byReturn[j].Return < b.Call; j++ {
			if maxOp == nil || byReturn[j].Input.(cInput).Token > maxOp.Input.(cInput).Token {
				maxOp = &byReturn[j]
			}
		}
		if maxOp != nil && b.Input.(cInput).Token < maxOp.Input.(cInput).Token {
			out = append(out, fmt.Sprintf("accepted %s began after accepted %s returned", opString(b), opString(*maxOp)))
		}
	}
	return out
}

// counterAnomalies is check (iii). It returns how many increments of unknown
// outcome took effect, and the anomalies.
func counterAnomalies(h history, final cState) (tookEffect int, anomalies []string) {
	accepted := map[int64]porcupine.Operation{}
	unknown := map[int64]bool{}
	for _, o := range h.ops {
		i, out := o.Input.(cInput), o.Output.(cOutput)
		if i.Kind != oplog.Incr {
			continue
		}
		if i.To != i.From+1 {
			anomalies = append(anomalies, "an increment that does not add one: "+opString(o))
		}
		switch {
		case out.Unknown:
			unknown[i.To] = true
		case out.Result == oplog.OK:
			if prev, dup := accepted[i.To]; dup {
				anomalies = append(anomalies, fmt.Sprintf("lost update: two accepted increments wrote %d: %s and %s", i.To, opString(prev), opString(o)))
			}
			accepted[i.To] = o
			if i.To > final.Value {
				anomalies = append(anomalies, fmt.Sprintf("accepted %s wrote more than the final value %d", opString(o), final.Value))
			}
		}
	}
	for v := int64(1); v <= final.Value; v++ {
		if _, ok := accepted[v]; ok {
			continue
		}
		if unknown[v] {
			tookEffect++
			continue
		}
		anomalies = append(anomalies, fmt.Sprintf("value %d (final %d) was written by no increment", v, final.Value))
	}
	return tookEffect, anomalies
}

// counterRun reads the counter's final state and the contenders' operation
// logs in logDir, and builds the history the checkers read; it returns the
// final state too, and torn counts the log lines cut short. When the test fails, the logs are kept in a
// temporary directory.
func counterRun(ctx context.Context, t *testing.T, db *sql.DB, logDir string) (history, cState, int) {
	t.Helper()
	finalT := int64(clock.Now())
	var final cState
	if err := db.QueryRowContext(ctx, `SELECT value, fence FROM counter WHERE id = 1`).Scan(&final.Value, &final.Fence); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			keep, err := os.MkdirTemp("", "fence-e2e-logs-")
			if err == nil && os.CopyFS(keep, os.DirFS(logDir)) == nil {
				t.Logf("operation logs kept in %s", keep)
			}
		}
	})
	recs, torn, err := oplog.ReadDir(logDir)
	if err != nil {
		t.Fatal(err)
	}
	ops, err := oplog.Pair(recs)
	if err != nil {
		t.Fatal(err)
	}
	return buildHistory(ops, final, finalT), final, torn
}
