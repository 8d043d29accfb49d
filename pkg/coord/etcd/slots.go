package etcd

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/internal/coordkit"
)

// Semaphores (coord.AcquireOptions.Slots above 1). The holders and waiters
// of a semaphore are keys of the lock as a lock's are
// (<prefix>locks/<escape(name)>/<lease>), with "slots" in their value, and
// a holder's value also has its "slot" and "acquired_at" (put by the grant:
// a key without acquired_at waits). Each held slot is a second key on the
// holder's lease, <prefix>slots/<escape(name)>/<slot>, whose value is the
// holder's lease id: the grant takes it in the same transaction, comparing
// that it is free, so that two grants never share a slot; it goes with the
// lease (a semaphore's lease is never kept for reuse, see leases).
//
// The token is the key's create revision, so grants go in that order: a
// key may hold only when every key ahead of it holds and there are fewer
// of them than the slots (and the operator limit) allow. Keys ahead can
// only go or start holding, never come back to waiting, so that stays true
// once read, and the grant needs no compare on them. A waiter whose key
// just ahead waits watches that key (its grant or its end); the first
// waiter, behind holders only, watches the deletions of the lock's keys
// (one of them must go) and, under a limit, the limits.

// slotsRange is the prefix of the slot keys of lock name.
func (c *coordinator) slotsRange(name string) string {
	return c.prefix + "slots/" + url.PathEscape(name) + "/"
}

func (c *coordinator) slotKey(name string, slot int) string {
	return c.slotsRange(name) + strconv.Itoa(slot)
}

// checkSlots refuses, with a *coordkit.SlotsError, Slots want on a lock whose
// keys kvs (other than our own, key) record other slots.
func checkSlots(name string, kvs []*mvccpb.KeyValue, key string, want int) error {
	for _, kv := range kvs {
		if string(kv.Key) == key {
			continue
		}
		if have := coordkit.SlotsOf(decodeMeta(kv.Value).Slots); have != want {
			return &coordkit.SlotsError{Lock: name, Have: have, Want: want}
		}
	}
	return nil
}

// allowed is how many may hold a lock of slots under the limit lim.
func allowed(slots int, lim *coord.Limit) int {
	if lim != nil && lim.Max < slots {
		return lim.Max
	}
	return slots
}

// slotChoice is the lowest slot free for a grant, from the slot keys read
// (slotKVs) and the lock's keys (kvs): a slot key whose holder's key is not
// on the lock is free too (and is compared by its mod revision).
func (c *coordinator) slotChoice(name string, slots int, kvs, slotKVs []*mvccpb.KeyValue) (int, clientv3.Cmp, bool) {
	taken := map[int]*mvccpb.KeyValue{}
	for _, kv := range slotKVs {
		s, err := strconv.Atoi(string(kv.Key[len(c.slotsRange(name)):]))
		if err == nil {
			taken[s] = kv
		}
	}
	for s := range slots {
		kv, ok := taken[s]
		if !ok {
			return s, clientv3.Compare(clientv3.CreateRevision(c.slotKey(name, s)), "=", 0), true
		}
		holderKey := c.lockRange(name) + string(kv.Value)
		if !slices.ContainsFunc(kvs, func(k *mvccpb.KeyValue) bool { return string(k.Key) == holderKey }) {
			return s, clientv3.Compare(clientv3.ModRevision(c.slotKey(name, s)), "=", kv.ModRevision), true
		}
	}
	return 0, clientv3.Cmp{}, false
}

// slotReads are the reads of a semaphore's state, in a transaction's Else.
func (c *coordinator) slotReads(name string) []clientv3.Op {
	return []clientv3.Op{
		clientv3.OpGet(c.lockRange(name), clientv3.WithPrefix(), byCreate),
		c.limitsGet(),
		clientv3.OpGet(c.slotsRange(name), clientv3.WithPrefix()),
	}
}

// slotState is a semaphore as read at rev: its keys by create revision,
// the limit that binds it and its slot keys.
type slotState struct {
	rev     int64
	kvs     []*mvccpb.KeyValue
	lim     *coord.Limit
	slotKVs []*mvccpb.KeyValue
}

func (c *coordinator) parseSlotReads(name string, resp *clientv3.TxnResponse, at int) (slotState, error) {
	r := resp.Responses[at:]
	lim, err := c.effectiveOf(name, r[1].GetResponseRange().Kvs)
	return slotState{rev: resp.Header.Revision, kvs: r[0].GetResponseRange().Kvs, lim: lim,
		slotKVs: r[2].GetResponseRange().Kvs}, err
}

// eligible reports whether a key created at myRev (0: one not yet put) may
// hold now: every key ahead of it holds and there are fewer than allowed.
// It returns the key just ahead too (nil: none).
func eligible(st slotState, myRev int64, slots int) (bool, *mvccpb.KeyValue) {
	var ahead []*mvccpb.KeyValue
	for _, kv := range st.kvs {
		if myRev == 0 || kv.CreateRevision < myRev {
			ahead = append(ahead, kv)
		}
	}
	var pred *mvccpb.KeyValue
	if len(ahead) > 0 {
		pred = ahead[len(ahead)-1]
	}
	if pred != nil && decodeMeta(pred.Value).AcquiredAt == nil {
		return false, pred // a waiter ahead: it goes first
	}
	return len(ahead) < allowed(slots, st.lim), pred
}

// trySlot is a try-lock of a semaphore (Wait 0) read as st: it puts key as
// a holder in the lowest free slot when it may hold (and no key was
// created since the read), reading again when the transaction fails.
// held is the key's value less its slot. It returns the slot and the
// revision of the grant, or ok false with the state last read.
func (c *coordinator) trySlot(ctx context.Context, name, key string, id clientv3.LeaseID, slots int, held meta, st slotState) (slot int, rev int64, last slotState, ok bool, err error) {
	for {
		may, _ := eligible(st, 0, slots)
		s, cmp, free := c.slotChoice(name, slots, st.kvs, st.slotKVs)
		if !may || !free {
			return 0, 0, st, false, nil
		}
		m := held
		m.Slot = s
		resp, err := c.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(c.lockRange(name)), "<", st.rev+1).WithPrefix(), cmp, c.limitsCmp(st.rev)).
			Then(clientv3.OpPut(key, m.encode(), clientv3.WithLease(id)), clientv3.OpPut(c.slotKey(name, s), formatID(id), clientv3.WithLease(id))).
			Else(c.slotReads(name)...).
			Commit()
		if err != nil {
			return 0, 0, st, false, err
		}
		if resp.Succeeded {
			return s, resp.Header.Revision, st, true, nil
		}
		if st, err = c.parseSlotReads(name, resp, 0); err != nil {
			return 0, 0, st, false, err
		}
		if err := checkSlots(name, st.kvs, key, slots); err != nil {
			return 0, 0, st, false, err
		}
	}
}

// waitSlot waits until the key created at myRev holds a slot of the
// semaphore (see the top of this file) and returns the slot; st is the
// state read when the key was put. Each attempt of the grant is bounded by
// claimTimeout and tried again, as a lock's claim is. When ctx ends while
// a limit holds the semaphore back, the error wraps the *coordkit.LimitError.
func (c *coordinator) waitSlot(ctx context.Context, name, key string, id clientv3.LeaseID, myRev int64, slots int, st slotState, lost <-chan error, claim func(slot int) string) (slot int, err error) {
	w := &slotWaiter{c: c, name: name, key: key, id: id, myRev: myRev, slots: slots, lost: lost, claim: claim}
	for {
		may, pred := eligible(st, myRev, slots)
		s, cmp, free := c.slotChoice(name, slots, st.kvs, st.slotKVs)
		var (
			resp *clientv3.TxnResponse
			step slotStep
		)
		if may && free {
			resp, step, err = w.grant(ctx, s, cmp, st.rev)
		} else {
			resp, step, err = w.await(ctx, pred, st, may)
		}
		switch step {
		case slotGranted:
			return s, nil
		case slotGone:
			return 0, errLeaseGone
		case slotFailed:
			return 0, err
		case slotRead:
			if st, err = c.parseSlotReads(name, resp, 0); err != nil {
				return 0, err
			}
		}
	}
}

// slotWaiter is a semaphore's waiter whose key was put at myRev.
type slotWaiter struct {
	c         *coordinator
	name, key string
	id        clientv3.LeaseID
	myRev     int64
	slots     int
	lost      <-chan error
	claim     func(slot int) string
}

// slotStep is where a semaphore's waiter goes after one step.
type slotStep int

const (
	slotAgain   slotStep = iota // no answer in time: the same step again
	slotRead                    // the semaphore was read again: decide again
	slotGranted                 // the slot is ours
	slotGone                    // our lease, or our key, is gone
	slotFailed                  // an error ends the wait
)

// afterSlotTxn decides a step's transaction: unanswered (to try again),
// leaseGone, failed (another error), granted (the grant committed),
// keyGone (our key is no longer on the lock).
func afterSlotTxn(unanswered, leaseGone, failed, granted, keyGone bool) slotStep {
	switch {
	case unanswered:
		return slotAgain
	case leaseGone:
		return slotGone
	case failed:
		return slotFailed
	case granted:
		return slotGranted
	case keyGone:
		return slotGone
	}
	return slotRead
}

// grant tries to take slot s, compared by cmp, with the limits as read at
// rev; each attempt is bounded by claimTimeout, as a lock's claim is.
func (w *slotWaiter) grant(ctx context.Context, s int, cmp clientv3.Cmp, rev int64) (*clientv3.TxnResponse, slotStep, error) {
	c := w.c
	tctx, cancel := context.WithTimeout(ctx, claimTimeout)
	defer cancel()
	resp, err := c.cli.Txn(tctx).
		If(clientv3.Compare(clientv3.CreateRevision(w.key), "=", w.myRev), cmp, c.limitsCmp(rev)).
		Then(clientv3.OpPut(w.key, w.claim(s), clientv3.WithLease(w.id)), clientv3.OpPut(c.slotKey(w.name, s), formatID(w.id), clientv3.WithLease(w.id))).
		Else(w.reads()...).
		Commit()
	return resp, w.decide(ctx, tctx, resp, err, true), c.mapErr(ctx, "wait", err)
}

func (w *slotWaiter) reads() []clientv3.Op {
	return append(w.c.slotReads(w.name), clientv3.OpGet(w.key, clientv3.WithCountOnly()))
}

func (w *slotWaiter) decide(ctx, tctx context.Context, resp *clientv3.TxnResponse, err error, grant bool) slotStep {
	if err != nil {
		return afterSlotTxn(retryable(ctx, tctx, err), errors.Is(err, rpctypes.ErrLeaseNotFound), true, false, false)
	}
	if grant && resp.Succeeded {
		// The grant's Then: its two puts, none of the reads.
		return afterSlotTxn(false, false, false, true, false)
	}
	return afterSlotTxn(false, false, false, false, resp.Responses[3].GetResponseRange().Count == 0)
}

// await waits for the key just ahead when it waits, else for a deletion
// among the holders (and a change of the limits), then reads the
// semaphore again. When ctx ends while a limit holds the semaphore back,
// the error wraps the *coordkit.LimitError.
func (w *slotWaiter) await(ctx context.Context, pred *mvccpb.KeyValue, st slotState, may bool) (*clientv3.TxnResponse, slotStep, error) {
	c := w.c
	var err error
	if pred != nil && decodeMeta(pred.Value).AcquiredAt == nil {
		err = c.watchChange(ctx, watchSpec{kv: pred}, st.rev+1, w.lost)
	} else {
		err = c.watchChange(ctx, watchSpec{rng: c.lockRange(w.name), deletes: true, limits: st.lim != nil}, st.rev+1, w.lost)
	}
	if err != nil {
		if ctx.Err() != nil && st.lim != nil && !may {
			return nil, slotFailed, fmt.Errorf("%w (%w)", &coordkit.LimitError{Lock: w.name, Limit: *st.lim, Holders: holders(st.kvs)}, err)
		}
		return nil, slotFailed, err
	}
	for {
		rctx, cancel := context.WithTimeout(ctx, claimTimeout)
		resp, err := c.cli.Txn(rctx).Then(w.reads()...).Commit()
		step := w.decide(ctx, rctx, resp, err, false)
		cancel()
		if step != slotAgain {
			return resp, step, c.mapErr(ctx, "wait", err)
		}
	}
}

// holders counts the keys of kvs that hold.
func holders(kvs []*mvccpb.KeyValue) int {
	n := 0
	for _, kv := range kvs {
		if decodeMeta(kv.Value).AcquiredAt != nil {
			n++
		}
	}
	return n
}
