package etcd

import (
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// bools calls f with every combination of n booleans.
func bools(n int, f func(b []bool)) {
	for m := 0; m < 1<<n; m++ {
		b := make([]bool, n)
		for i := range b {
			b[i] = m&(1<<i) != 0
		}
		f(b)
	}
}

// TestAfterPut: every combination of the first transaction's answer leads
// to the step the acquisition takes.
func TestAfterPut(t *testing.T) {
	bools(4, func(b []bool) {
		succeeded, waits, semaphore, allows := b[0], b[1], b[2], b[3]
		for _, keys := range []int{0, 1, 3} {
			want := putBusy
			switch {
			case succeeded:
				want = putHeld // the lock was free: never queued, never refused
			case waits:
				want = putQueued // a waiter's key went into the queue
			case keys == 0 && allows:
				want = putRetry // free but the limits as compared changed
			case semaphore:
				want = putTrySlot // a held semaphore may have a free slot
			}
			if got := afterPut(succeeded, waits, semaphore, keys, allows); got != want {
				t.Errorf("afterPut(succeeded %v, waits %v, semaphore %v, keys %d, allows %v) = %v, want %v",
					succeeded, waits, semaphore, keys, allows, got, want)
			}
		}
	})
}

// TestAfterWait: the caller's cancellation wins over everything; a lease
// that ended requeues even when the wait also ran out; a limit is named
// only when the wait ran out.
func TestAfterWait(t *testing.T) {
	bools(4, func(b []bool) {
		cancelled, gone, over, limited := b[0], b[1], b[2], b[3]
		want := endError
		switch {
		case cancelled:
			want = endCancelled
		case gone:
			want = endRequeue
		case over && limited:
			want = endLimited
		case over:
			want = endGaveUp
		}
		if got := afterWait(cancelled, gone, over, limited); got != want {
			t.Errorf("afterWait(%v, %v, %v, %v) = %v, want %v", cancelled, gone, over, limited, got, want)
		}
	})
}

// TestAfterClaim: every combination of a lock waiter's claim attempt's
// answer (afterTxn, then afterRead on the lock as read). An attempt
// without an answer is tried again whatever else is set (the claim may be
// sent twice); a committed claim holds only when no error came; a key ahead
// is watched before any limit is looked at.
func TestAfterClaim(t *testing.T) {
	bools(8, func(b []bool) {
		unanswered, leaseGone, failed, claimed, keyGone, ahead, allows, predHolds := b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]
		want := "held back"
		switch {
		case unanswered:
			want = "again"
		case leaseGone:
			want = "gone"
		case failed:
			want = "failed"
		case claimed:
			want = "mine"
		case keyGone:
			want = "gone"
		case ahead:
			want = "watch"
		case allows:
			want = "claim"
		}
		got := map[txnStep]string{txnAgain: "again", txnGone: "gone", txnFailed: "failed", txnDone: "mine"}[afterTxn(unanswered, leaseGone, failed, claimed, keyGone)]
		if got == "" {
			got = map[waitStep]string{waitClaim: "claim", waitPred: "watch", waitHeldBack: "held back"}[afterRead(!ahead && allows, true, ahead, ahead && predHolds, false)]
		}
		if got != want {
			t.Errorf("claim %v: %s, want %s", b, got, want)
		}
	})
}

// TestAfterTxn: a waiter's transaction (a lock's claim, a semaphore's
// grant or read).
func TestAfterTxn(t *testing.T) {
	bools(5, func(b []bool) {
		want := txnRead
		switch {
		case b[0]:
			want = txnAgain
		case b[1]:
			want = txnGone
		case b[2]:
			want = txnFailed
		case b[3]:
			want = txnDone
		case b[4]:
			want = txnGone
		}
		if got := afterTxn(b[0], b[1], b[2], b[3], b[4]); got != want {
			t.Errorf("afterTxn(%v) = %v, want %v", b, got, want)
		}
	})
}

// TestAfterRead: a semaphore's waiter claims a free slot once eligible,
// watches the key ahead while it waits, else its holders' deletions.
func TestAfterRead(t *testing.T) {
	bools(4, func(b []bool) {
		may, free, pred, predHolds := b[0], b[1], b[2], b[3]
		want := waitRange
		switch {
		case may && free:
			want = waitClaim
		case pred && !predHolds:
			want = waitPred
		}
		if got := afterRead(may, free, pred, predHolds, true); got != want {
			t.Errorf("afterRead(%v, semaphore) = %v, want %v", b, got, want)
		}
	})
}

// TestAfterWatch: what a waiter's watch does with each response: a
// progress notification is only heard; a watch that ends while the waiter
// goes on is started again (elsewhere) when the channel closed or the
// member lost its leader, else the caller reads; a creation served late is
// checked by a read; a deletion ends the wait.
func TestAfterWatch(t *testing.T) {
	bools(7, func(b []bool) {
		n := watchNews{closed: b[0], progress: b[1], failed: b[2], noLeader: b[3], alive: b[4], late: b[5], deleted: b[6]}
		if n.noLeader && !n.failed || n.closed && (n.progress || n.late || n.deleted) {
			return // not a response the client sends
		}
		want := watchOn
		switch {
		case n.progress:
		case (n.closed || n.noLeader) && n.alive:
			want = watchAgain
		case n.closed || n.failed:
			want = watchEnded
		case n.late:
			want = watchLate
		case n.deleted:
			want = watchDeleted
		}
		if got := afterWatch(n); got != want {
			t.Errorf("afterWatch(%+v) = %v, want %v", n, got, want)
		}
	})
}

// TestNewsOf: watch responses read as the news afterWatch decides on.
func TestNewsOf(t *testing.T) {
	del := &clientv3.Event{Type: mvccpb.DELETE}
	put := &clientv3.Event{Type: mvccpb.PUT}
	for _, tc := range []struct {
		name string
		wr   clientv3.WatchResponse
		ok   bool
		want watchStep
	}{
		{"closed", clientv3.WatchResponse{}, false, watchAgain},
		{"no leader", clientv3.WatchResponse{Canceled: true, CancelReason: rpctypes.ErrNoLeader.Error()}, true, watchAgain},
		{"compacted", clientv3.WatchResponse{CompactRevision: 3}, true, watchEnded},
		{"created late", clientv3.WatchResponse{Created: true, Header: headerAt(10)}, true, watchLate},
		{"created in time", clientv3.WatchResponse{Created: true, Header: headerAt(9)}, true, watchOn},
		{"deleted", clientv3.WatchResponse{Events: []*clientv3.Event{put, del}}, true, watchDeleted},
		{"put only", clientv3.WatchResponse{Events: []*clientv3.Event{put}}, true, watchOn},
	} {
		if got := afterWatch(newsOf(tc.wr, tc.ok, 10, true, true)); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
	// A watch of any event (not deletions only) ends at a put too.
	if got := afterWatch(newsOf(clientv3.WatchResponse{Events: []*clientv3.Event{put}}, true, 10, false, true)); got != watchDeleted {
		t.Errorf("put on a watch of any event: %v, want %v", got, watchDeleted)
	}
}

// TestAfterResult: a hedged request returns the first answer of a member,
// holds a failed compare while copies are out (one of them may have
// succeeded first), and waits for the other copies while a copy got no
// answer.
func TestAfterResult(t *testing.T) {
	bools(2, func(b []bool) {
		answered, failedCmp := b[0], b[1]
		for _, pending := range []int{2, 1, 0} {
			want := resultLast
			switch {
			case answered && failedCmp && pending > 0:
				want = resultHold
			case answered:
				want = resultReturn
			case pending > 0:
				want = resultWait
			}
			if got := afterResult(answered, failedCmp, pending); got != want {
				t.Errorf("afterResult(%v, %v, %d pending) = %v, want %v", answered, failedCmp, pending, got, want)
			}
		}
	})
}

// TestStale: a lease is renewed before use once its last acknowledgment
// is limit old.
func TestStale(t *testing.T) {
	for _, tc := range []struct {
		age, ttl time.Duration
		want     bool
	}{
		{0, 15 * time.Second, false},
		{4999 * time.Millisecond, 15 * time.Second, false},
		{5 * time.Second, 15 * time.Second, true},
		{time.Minute, 15 * time.Second, true},
	} {
		if got := stale(tc.age, tc.ttl/3); got != tc.want {
			t.Errorf("stale(%v, %v) = %v, want %v", tc.age, tc.ttl, got, tc.want)
		}
	}
}

func headerAt(rev int64) *etcdserverpb.ResponseHeader {
	return &etcdserverpb.ResponseHeader{Revision: rev}
}
