package etcd

import (
	"net/url"
	"slices"
	"strconv"

	"go.etcd.io/etcd/api/v3/mvccpb"
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
// lease.
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

// stateReads are the reads of a lock's state, in a transaction: its keys
// (by create revision, or as opts say), the limits and, for a semaphore,
// its slot keys (a lock's user may have no permission on slots/).
func (c *coordinator) stateReads(name string, semaphore bool, opts ...clientv3.OpOption) []clientv3.Op {
	if opts == nil {
		opts = []clientv3.OpOption{clientv3.WithPrefix(), byCreate}
	}
	ops := []clientv3.Op{clientv3.OpGet(c.lockRange(name), opts...), c.limitsGet()}
	if semaphore {
		ops = append(ops, clientv3.OpGet(c.slotsRange(name), clientv3.WithPrefix()))
	}
	return ops
}

// lockState is a lock as read at rev: its keys by create revision, the
// limit that binds it and a semaphore's slot keys.
type lockState struct {
	rev     int64
	kvs     []*mvccpb.KeyValue
	lim     *coord.Limit
	slotKVs []*mvccpb.KeyValue
}

// parseState reads the answers of stateReads, the last of resp.Responses.
func (c *coordinator) parseState(name string, resp *clientv3.TxnResponse, semaphore bool) (lockState, error) {
	r := resp.Responses[len(resp.Responses)-2:]
	st := lockState{rev: resp.Header.Revision}
	if semaphore {
		r = resp.Responses[len(resp.Responses)-3:]
		st.slotKVs = r[2].GetResponseRange().Kvs
	}
	st.kvs = r[0].GetResponseRange().Kvs
	var err error
	st.lim, err = c.effectiveOf(name, r[1].GetResponseRange().Kvs)
	return st, err
}

// eligible reports whether a key created at myRev (0: one not yet put) may
// hold now: every key ahead of it holds and there are fewer than allowed.
// It returns the key just ahead too (nil: none).
func eligible(st lockState, myRev int64, slots int) (bool, *mvccpb.KeyValue) {
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
