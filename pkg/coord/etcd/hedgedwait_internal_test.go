package etcd

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestHedgedWaitHedgesAfterAFailure: a first copy that fails with no
// answer of a member, well before hedgeAfter, sends the other copies at
// once (a renewal whose lane failed it, a request whose member is gone),
// and the answer of one of them is returned; a wait with no answer for
// answerBound calls stuck once and marks the cluster silent.
func TestHedgedWaitHedgesAfterAFailure(t *testing.T) {
	results := make(chan attemptResult, 3)
	hedges := 0
	hedge := func() int {
		hedges++
		if hedges > 1 {
			return 0
		}
		results <- attemptResult{reply: "second"}
		return 1
	}
	results <- attemptResult{err: status.Error(codes.Unavailable, "connection refused")}
	start := time.Now()
	r := hedgedWait(context.Background(), newHealth(), false, results, hedge, func() { t.Error("stuck called") })
	if r.err != nil || r.reply != "second" {
		t.Fatalf("got %+v, want the hedged copy's answer", r)
	}
	if took := time.Since(start); took >= hedgeAfter {
		t.Errorf("answered after %v: the hedge waited for hedgeAfter", took)
	}

	results = make(chan attemptResult, 1)
	stuck := 0
	ctx, cancel := context.WithTimeout(context.Background(), answerBound+200*time.Millisecond)
	defer cancel()
	h := newHealth()
	r = hedgedWait(ctx, h, false, results, func() int { return 0 }, func() { stuck++ })
	if status.Code(r.err) != codes.DeadlineExceeded || stuck != 1 {
		t.Fatalf("got %v with stuck called %d times, want the deadline with stuck called once", r.err, stuck)
	}
	if !h.silent() {
		t.Error("no answer for answerBound (a renewal's, or a request's) did not mark the cluster silent")
	}
}
