// Package etcdstore is the history store of fence's etcd backend: one key
// per event,
//
//	<prefix>history/<url.PathEscape(lock)>/<sequence number, 20 digits>
//
// whose value is the event as JSON, and one head key per lock,
//
//	<prefix>history-heads/<url.PathEscape(lock)>   {"seq":N,"first":F,"lease":{"seq":S,...}}
//
// saying that the lock's events are numbered F to N, and which is its
// newest lease event (acquired, released, revoked, expired: number S,
// the event as its key holds it). PathEscape escapes "/", so no lock's key
// range contains another's, and zero-padded numbers sort as numbers.
//
// A Recorder looks for a lock's last lease event before it records each
// acquisition. LastLease finds it in the head, so that look costs the same
// however long the history is: etcd returns a range's last keys only by
// reading and sorting the whole range (on a lock with 1,000 events, 1.46
// against 0.30 ms in BenchmarkLastLease1000, on an idle in-process etcd;
// about 3 ms more per `fence run` on one etcd 3.4 member). A head without
// "lease" (older fence versions write it so) sends LastLease the long way
// until the next write of this version.
//
// A write is one transaction that checks the head is as the writer last saw
// it, puts the new events and the new head, and deletes, with one range
// delete, the oldest events beyond the count bound and those, from the
// oldest on, past the age bound; it also reads the oldest events left, for
// the store's next write (both ranges start at the head's first number: see
// writeOps). When another writer came first, the transaction reads the head
// and the oldest events instead, and the write is tried again on them. The
// lock's history thus never holds more
// than the bound (plus nothing: trimming is part of the write), and
// concurrent writers, in any number of processes, lose no event. Reads are
// linearizable and never return an event beyond either bound.
//
// A value or head that does not decode is an error wrapping
// coord.ErrUnavailable, and the store neither returns nor overwrites it.
// etcd keeps old revisions until it compacts them: run etcd with
// --auto-compaction-retention as for any busy key space.
package etcdstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/coord/etcd"
	"github.com/fence-dev/fence/pkg/history"
	"github.com/fence-dev/fence/pkg/history/internal/codec"
	hopts "github.com/fence-dev/fence/pkg/history/internal/opts"
	"github.com/fence-dev/fence/pkg/history/internal/trim"
	"github.com/fence-dev/fence/pkg/internal/etcdtxn"
)

// trimRead is how many of the oldest events a write reads to apply the age
// bound; when all of them are past it, it reads on, trimPage at a time.
const (
	trimRead = 16
	trimPage = 256
)

// maxBatch is the most events one transaction writes (etcd refuses
// transactions of more than 128 operations by default).
const maxBatch = 100

// maxAttempts bounds the retries of a write that keeps losing the race for
// the head to other writers.
const maxAttempts = 1000

// store is a history.Store on an etcd cluster.
type store struct {
	cli    *clientv3.Client
	prefix string
	opts   hopts.Options

	mu    sync.Mutex
	cache map[string]state // by lock: after this store's last write
}

var _ history.Store = (*store)(nil)

// New returns a store that keeps its events under <prefix>history/ through
// cli ("/fence/" when prefix is empty; a prefix not ending in "/" gets
// one, as etcd.NormalPrefix says, so "/fence" and "/fence/" are one
// namespace). Options set the bounds and the clock. The store does not own
// cli: closing it is the caller's business.
func New(cli *clientv3.Client, prefix string, opts ...history.Option) (history.Store, error) {
	o, err := hopts.New(opts...)
	if err != nil {
		return nil, err
	}
	return &store{cli: cli, prefix: etcd.NormalPrefix(prefix), opts: o, cache: map[string]state{}}, nil
}

// Range returns the key prefix of every event of lock.
func (s *store) Range(lock string) string {
	return s.prefix + "history/" + url.PathEscape(lock) + "/"
}

// HeadKey returns the key of the head of lock.
func (s *store) HeadKey(lock string) string {
	return s.headsPrefix() + url.PathEscape(lock)
}

func (s *store) headsPrefix() string { return s.prefix + "history-heads/" }

// key returns the key of event seq of lock.
func (s *store) key(lock string, seq uint64) string {
	return s.Range(lock) + fmt.Sprintf("%020d", seq)
}

// head is the value of a head key.
type head struct {
	Seq   uint64 `json:"seq"`
	First uint64 `json:"first"`
	// Lease is the lock's newest lease event (opts.OfLease), stored
	// as an event value with its number, when the head's writer knew it:
	// every write of this version carries it on from the head it replaces,
	// or sets it to the newest lease event it writes (why: see the package
	// doc). It is missing when none of the lock's events begins or ends a
	// lease yet, or when an older fence wrote the head (it drops what it
	// does not know).
	Lease json.RawMessage `json:"lease,omitempty"`
}

// Record implements history.Store.
func (s *store) Record(ctx context.Context, ev history.Event) error {
	return s.Append(ctx, []history.Event{ev})
}

// Append implements history.Store: the events of one lock are written in one
// transaction (per 100 events).
func (s *store) Append(ctx context.Context, evs []history.Event) error {
	return trim.EachLock(ctx, s.opts, evs, func(ctx context.Context, lock string, evs []history.Event) error {
		for len(evs) > 0 {
			n := min(len(evs), maxBatch)
			if err := s.appendWith(ctx, lock, evs[:n], s.commit); err != nil {
				return err
			}
			evs = evs[n:]
		}
		return nil
	})
}

// commitFunc commits a write's transaction: If(cmp).Then(then...).Else(els...).
type commitFunc func(ctx context.Context, cmp clientv3.Cmp, then, els []clientv3.Op) (*clientv3.TxnResponse, error)

// commit is the commitFunc of a write on the store's client.
func (s *store) commit(ctx context.Context, cmp clientv3.Cmp, then, els []clientv3.Op) (*clientv3.TxnResponse, error) {
	return s.cli.Txn(ctx).If(cmp).Then(then...).Else(els...).Commit()
}

// appendWith writes the events of one lock (within the age bound), its
// transaction committed by commit. An error of commit wrapping errNotHeld
// is returned as it is.
func (s *store) appendWith(ctx context.Context, lock string, evs []history.Event, commit commitFunc) error {
	cut := s.opts.Cutoff()
	vals := make([]string, len(evs))
	for i, ev := range evs {
		b, err := codec.Encode(0, ev)
		if err != nil {
			return err
		}
		vals[i] = string(b)
	}
	var err error
	st, ok := s.cached(lock)
	if !ok {
		if st, err = s.readState(ctx, lock); err != nil {
			return err
		}
	}
	for attempt := 0; attempt < maxAttempts && err == nil; attempt++ {
		var done bool
		if st, done, err = s.tryWrite(ctx, lock, st, evs, vals, cut, commit); done {
			return nil
		}
	}
	if err == nil {
		err = fmt.Errorf("%w: history of %q: gave up after %d attempts to write it against other writers",
			coord.ErrUnavailable, lock, maxAttempts)
	}
	s.forget(lock) // what the store knew of the lock may be wrong
	return err
}

// readState reads what a write of lock needs to know (stateOps).
func (s *store) readState(ctx context.Context, lock string) (state, error) {
	resp, err := s.cli.Txn(ctx).Then(s.stateOps(lock)...).Commit()
	if err != nil {
		return state{}, unavailable(ctx, lock, err)
	}
	return s.decodeState(lock, resp.Responses)
}

// tryWrite is one attempt of appendWith on st, the lock's state as last
// seen: done when the events are written; else next is the state another
// writer left, to try again on.
func (s *store) tryWrite(ctx context.Context, lock string, st state, kept []history.Event, vals []string, cut time.Time, commit commitFunc) (next state, done bool, err error) {
	h := st.head
	last := h.Seq + uint64(len(vals))
	first, err := s.firstKept(ctx, lock, st, last, cut)
	if err != nil {
		return state{}, false, err
	}
	mark, err := leaseMark(h, kept)
	if err != nil {
		return state{}, false, err
	}
	nh := head{Seq: last, First: first, Lease: mark}
	ops := s.writeOps(lock, h, nh, vals)
	cmp := clientv3.Compare(clientv3.CreateRevision(s.HeadKey(lock)), "=", 0)
	if st.exists {
		cmp = clientv3.Compare(clientv3.ModRevision(s.HeadKey(lock)), "=", st.modRev)
	}
	tr, err := commit(ctx, cmp, ops, s.stateOps(lock))
	switch {
	case err != nil && errors.Is(err, errNotHeld):
		return state{}, false, err
	case err != nil:
		return state{}, false, unavailable(ctx, lock, err)
	case !tr.Succeeded:
		// Another writer came first; its result is in the Else reads.
		next, err = s.decodeState(lock, tr.Responses)
		return next, false, err
	}
	next = state{head: nh, exists: true, modRev: tr.Header.Revision}
	if next.oldest, err = s.decodeAll(lock, tr.Responses[len(tr.Responses)-1].GetResponseRange().Kvs); err != nil {
		return state{}, false, err
	}
	s.keep(lock, next)
	return next, true, nil
}

// firstKept is the first event number a write that makes last the newest
// keeps: by the count bound, then past the age bound (cut) from the oldest
// on, reading further (trimPage at a time) while all that was read is past
// it.
func (s *store) firstKept(ctx context.Context, lock string, st state, last uint64, cut time.Time) (uint64, error) {
	first, oldest := st.head.First, st.oldest
	for limit := trimRead; ; limit = trimPage {
		var readOn bool
		first, readOn = trimFirst(st.head, first, last, s.opts.MaxEvents, oldest, limit, cut)
		if !readOn {
			return first, nil
		}
		end := clientv3.GetPrefixRangeEnd(s.Range(lock))
		more, err := s.cli.Get(ctx, s.key(lock, oldest[len(oldest)-1].Seq+1), clientv3.WithRange(end), clientv3.WithLimit(trimPage),
			clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend), clientv3.WithSerializable())
		if err != nil {
			return 0, unavailable(ctx, lock, err)
		}
		if oldest, err = s.decodeAll(lock, more.Kvs); err != nil {
			return 0, err
		}
	}
}

// trimFirst decides the first event number kept by a write that makes last
// the newest of a history whose head is h: at least first, within the
// count bound maxEvents, and past the events of oldest (read with limit,
// oldest first) that are older than cut and not newer than h. readOn says
// that all of oldest went, and as many as limit were read: the events after
// them may be past the age bound too.
func trimFirst(h head, first, last uint64, maxEvents int, oldest []history.Entry, limit int, cut time.Time) (uint64, bool) {
	if n := uint64(maxEvents); last >= n && last-n+1 > first {
		first = last - n + 1
	}
	aged := 0
	for _, e := range oldest {
		if e.Seq >= first && (e.Seq > h.Seq || !e.Event.Time.Before(cut)) {
			break
		}
		first = max(first, e.Seq+1) // (below first: trimmed by count anyway)
		aged++
	}
	return first, len(oldest) > 0 && aged == len(oldest) && len(oldest) >= limit
}

// leaseMark is the lease event the head of a write of kept after h names:
// the newest of kept's lease events, else h's.
func leaseMark(h head, kept []history.Event) (json.RawMessage, error) {
	mark := h.Lease
	for i, ev := range kept {
		if hopts.OfLease(string(ev.Kind)) {
			var err error
			if mark, err = codec.Encode(h.Seq+1+uint64(i), ev); err != nil {
				return nil, err
			}
		}
	}
	return mark, nil
}

// writeOps are the Then operations of a write of vals after head h that
// leaves head nh: the new head, the events (those of a batch larger than
// the count bound from nh.First on), the delete of the events from h.First
// to nh.First, and last the oldest events kept, for the next write (a
// transaction's reads see its own writes). Both the delete and the read
// start at a first event number, never at the start of the lock's range:
// etcd's index keeps the keys of deleted events until it is compacted, and
// a range from the start of a long-lived lock's history would walk past
// every one of them.
func (s *store) writeOps(lock string, h, nh head, vals []string) []clientv3.Op {
	hv, _ := json.Marshal(nh)
	ops := []clientv3.Op{clientv3.OpPut(s.HeadKey(lock), string(hv))}
	for i, v := range vals {
		if seq := h.Seq + 1 + uint64(i); seq >= nh.First {
			ops = append(ops, clientv3.OpPut(s.key(lock, seq), v))
		}
	}
	if nh.First > h.First {
		ops = append(ops, clientv3.OpDelete(s.key(lock, h.First), clientv3.WithRange(s.key(lock, nh.First))))
	}
	return append(ops, s.oldestOp(lock, s.key(lock, nh.First)))
}

// stateOps are the reads of what a write needs to know of lock's history
// (decodeState): its head and its oldest events. Without the head, the
// oldest events are read from the start of the lock's range.
func (s *store) stateOps(lock string) []clientv3.Op {
	return []clientv3.Op{clientv3.OpGet(s.HeadKey(lock)), s.oldestOp(lock, s.Range(lock))}
}

// oldestOp reads lock's oldest trimRead events from key from on.
func (s *store) oldestOp(lock, from string) clientv3.Op {
	return clientv3.OpGet(from, clientv3.WithRange(clientv3.GetPrefixRangeEnd(s.Range(lock))), clientv3.WithLimit(trimRead),
		clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend))
}

// state is what a write needs to know of a lock's history: its head (and
// the head's revision, compared by the write) and its oldest events.
type state struct {
	head   head
	exists bool
	modRev int64
	oldest []history.Entry
}

// decodeState reads the responses of stateOps.
func (s *store) decodeState(lock string, resps []*etcdserverpb.ResponseOp) (state, error) {
	if len(resps) != 2 || resps[0].GetResponseRange() == nil || resps[1].GetResponseRange() == nil {
		return state{}, fmt.Errorf("%w: history of %q: unexpected transaction response", coord.ErrUnavailable, lock)
	}
	st, err := headState(lock, resps[0].GetResponseRange().Kvs)
	if err != nil {
		return state{}, err
	}
	st.oldest, err = s.decodeAll(lock, resps[1].GetResponseRange().Kvs)
	return st, err
}

// headState is the state of lock as its head key, read as kvs, tells
// (without the oldest events).
func headState(lock string, kvs []*mvccpb.KeyValue) (state, error) {
	st := state{head: head{First: 1}}
	if len(kvs) > 0 {
		h, err := decodeHead(kvs[0].Value)
		if err != nil {
			return state{}, corrupt(lock, string(kvs[0].Key), err.Error())
		}
		st.head, st.exists, st.modRev = h, true, kvs[0].ModRevision
	}
	return st, nil
}

// maxCached bounds the locks whose state a store remembers.
const maxCached = 1024

func (s *store) cached(lock string) (state, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, ok := s.cache[lock]
	return st, ok
}

func (s *store) keep(lock string, st state) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.cache) >= maxCached {
		clear(s.cache)
	}
	s.cache[lock] = st
}

func (s *store) forget(lock string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.cache, lock)
}

// History implements history.Store.
func (s *store) History(ctx context.Context, lock string, limit int) ([]history.Event, error) {
	if err := coord.ValidateName(lock); err != nil {
		return nil, err
	}
	resp, err := s.cli.Do(ctx, s.newestOp(lock, limit))
	if err != nil {
		return nil, unavailable(ctx, lock, err)
	}
	entries, err := s.decodeAll(lock, resp.Get().Kvs)
	if err != nil {
		return nil, err
	}
	return trim.Newest(s.opts, entries, limit), nil
}

// newestOp reads lock's newest events, newest first: as many as the count
// bound keeps, at most limit (0: no limit). trim.Newest makes History's
// answer of them.
func (s *store) newestOp(lock string, limit int) clientv3.Op {
	rng := s.Range(lock)
	return clientv3.OpGet(rng, clientv3.WithRange(clientv3.GetPrefixRangeEnd(rng)),
		clientv3.WithSort(clientv3.SortByKey, clientv3.SortDescend), clientv3.WithLimit(int64(s.opts.Window(limit))))
}

// Latest returns what History(ctx, lock, n) returns, the lock's last n kept
// events (n <= 0: all of them), and reads in the same transaction what the
// store's next write of lock needs to know (its head and oldest events),
// which it keeps for that write, so that the write is one round trip (a
// write that finds the head moved meanwhile reads it again, as after any
// other writer).
func (s *store) Latest(ctx context.Context, lock string, n int) ([]history.Event, error) {
	if err := coord.ValidateName(lock); err != nil {
		return nil, err
	}
	ops := append(s.stateOps(lock), s.newestOp(lock, n))
	resp, err := s.cli.Txn(ctx).Then(ops...).Commit()
	if err != nil {
		return nil, unavailable(ctx, lock, err)
	}
	if len(resp.Responses) != len(ops) || resp.Responses[2].GetResponseRange() == nil {
		return nil, fmt.Errorf("%w: history of %q: unexpected transaction response", coord.ErrUnavailable, lock)
	}
	st, err := s.decodeState(lock, resp.Responses[:2])
	if err != nil {
		return nil, err
	}
	entries, err := s.decodeAll(lock, resp.Responses[2].GetResponseRange().Kvs)
	if err != nil {
		return nil, err
	}
	s.keep(lock, st)
	return trim.Newest(s.opts, entries, n), nil
}

// LastLease returns the newest lease event (opts.OfLease) among lock's
// last n kept events (n <= 0: all of them), the one a scan of
// Latest(ctx, lock, n) from its end would find, and keeps the head for the
// store's next write of lock. It decides from the head's record of that
// event (see head), its numbers and the age bound: one read of one key,
// whatever the length of the history. Without a record it reads as Latest
// does.
func (s *store) LastLease(ctx context.Context, lock string, n int) (history.Event, bool, error) {
	if err := coord.ValidateName(lock); err != nil {
		return history.Event{}, false, err
	}
	resp, err := s.cli.Get(ctx, s.HeadKey(lock))
	if err != nil {
		return history.Event{}, false, unavailable(ctx, lock, err)
	}
	st, err := headState(lock, resp.Kvs)
	if err != nil {
		return history.Event{}, false, err
	}
	// The oldest events are not read (from the start of the lock's range:
	// see writeOps). The next write applies the count bound, and reads the
	// oldest events it keeps for the write after it (the release's), which
	// applies the age bound.
	s.keep(lock, st)
	h := st.head
	if !st.exists {
		return history.Event{}, false, nil
	}
	if len(h.Lease) > 0 {
		seq, ev, err := codec.Decode(h.Lease) // decodeHead checked it
		if err != nil || ev.Lock != lock {
			s.forget(lock)
			return history.Event{}, false, corrupt(lock, s.HeadKey(lock), "its lease event is of another lock")
		}
		// Latest's window: the newest min(n, MaxEvents) events of the
		// lock's kept range, without those past the age bound.
		if seq < h.First || h.Seq-seq >= uint64(s.opts.Window(n)) {
			return history.Event{}, false, nil // nor any lease event before it
		}
		if !ev.Time.Before(s.opts.Cutoff()) {
			return ev, true, nil
		}
		// Past the age bound, yet in the window: an event older than one
		// before it (from a clock behind), which Latest would find. The
		// long way, as for a head without the event.
	}
	evs, err := s.Latest(ctx, lock, n)
	if err != nil {
		return history.Event{}, false, err
	}
	ev, ok := hopts.LastLease(evs, func(e history.Event) string { return string(e.Kind) })
	return ev, ok, nil
}

// Since implements history.Store.
func (s *store) Since(ctx context.Context, lock string, after uint64) ([]history.Entry, error) {
	if err := coord.ValidateName(lock); err != nil {
		return nil, err
	}
	rng := s.Range(lock)
	resp, err := s.cli.Get(ctx, s.key(lock, after+1), clientv3.WithRange(clientv3.GetPrefixRangeEnd(rng)),
		clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend))
	if err != nil {
		return nil, unavailable(ctx, lock, err)
	}
	entries, err := s.decodeAll(lock, resp.Kvs)
	if err != nil {
		return nil, err
	}
	return trim.Kept(s.opts, entries, trim.EntryTime, 0), nil
}

// Heads implements history.Store.
func (s *store) Heads(ctx context.Context) ([]history.Head, error) {
	p := s.headsPrefix()
	resp, err := s.cli.Get(ctx, p, clientv3.WithPrefix())
	if err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil {
			return nil, fmt.Errorf("history heads: %w", ctxErr)
		}
		return nil, fmt.Errorf("%w: history heads: %w", coord.ErrUnavailable, err)
	}
	heads := make([]history.Head, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		lock, err := url.PathUnescape(strings.TrimPrefix(string(kv.Key), p))
		if err != nil || coord.ValidateName(lock) != nil {
			continue // not a key of ours
		}
		h, err := decodeHead(kv.Value)
		if err != nil {
			return nil, corrupt(lock, string(kv.Key), err.Error())
		}
		heads = append(heads, history.Head{Lock: lock, Seq: h.Seq})
	}
	sort.Slice(heads, func(i, j int) bool { return heads[i].Lock < heads[j].Lock })
	return heads, nil
}

// decodeAll decodes event keys of lock, in the order given.
func (s *store) decodeAll(lock string, kvs []*mvccpb.KeyValue) ([]history.Entry, error) {
	rng := s.Range(lock)
	out := make([]history.Entry, 0, len(kvs))
	for _, kv := range kvs {
		k := string(kv.Key)
		digits := strings.TrimPrefix(k, rng)
		seq, err := strconv.ParseUint(digits, 10, 64)
		if err != nil || len(digits) != 20 || seq == 0 {
			return nil, corrupt(lock, k, "the key is not a sequence number")
		}
		_, ev, err := codec.Decode(kv.Value)
		if err != nil {
			return nil, corrupt(lock, k, err.Error())
		}
		if ev.Lock != lock {
			return nil, corrupt(lock, k, fmt.Sprintf("it is an event of lock %q", ev.Lock))
		}
		out = append(out, history.Entry{Seq: seq, Event: ev})
	}
	return out, nil
}

func decodeHead(b []byte) (head, error) {
	var h head
	if err := json.Unmarshal(b, &h); err != nil {
		return h, err
	}
	if h.First == 0 || h.First > h.Seq+1 {
		return h, fmt.Errorf("head %s is inconsistent", b)
	}
	if len(h.Lease) > 0 {
		seq, ev, err := codec.Decode(h.Lease)
		if err != nil {
			return h, fmt.Errorf("head's lease event: %v", err)
		}
		if seq == 0 || seq > h.Seq || !hopts.OfLease(string(ev.Kind)) {
			return h, fmt.Errorf("head %s is inconsistent", b)
		}
	}
	return h, nil
}

func corrupt(lock, key, why string) error {
	return fmt.Errorf("%w: history of %q: bad value at %s (%s); refusing to read or overwrite it",
		coord.ErrUnavailable, lock, key, why)
}

// unavailable wraps a failed etcd call: the context's own error stays
// visible, anything else is coord.ErrUnavailable.
func unavailable(ctx context.Context, lock string, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		return fmt.Errorf("history of %q: %w", lock, ctxErr)
	}
	return fmt.Errorf("%w: history of %q: %w", coord.ErrUnavailable, lock, err)
}

// errNotHeld ends a write with the release (AppendRelease) whose lease no
// longer holds the lock.
var errNotHeld = errors.New("the lease no longer holds the lock")

// AppendRelease is the history Recorder's one-step release (its contract:
// history.releaseAppender) on the etcd coordinator whose client the store
// shares (package etcdtxn, the seam between them): ev is written in the
// transaction that deletes the holder's key. An error with done true is
// etcdtxn.Release's.
func (s *store) AppendRelease(ctx context.Context, c coord.Coordinator, leaseID string, token uint64, ev history.Event) (done bool, err error) {
	ec, ok := c.(interface { // package etcd's coordinator
		Client() *clientv3.Client
		Prefix() string
	})
	if !ok || ec.Client() != s.cli || ec.Prefix() != s.prefix {
		return false, nil
	}
	if ev, err = history.Normalize(ev, s.opts.Now()); err != nil {
		return false, err
	}
	if ev.Time.Before(s.opts.Cutoff()) {
		return false, nil // kept nowhere: nothing to write with the release
	}
	var relErr error
	err = s.appendWith(ctx, ev.Lock, []history.Event{ev}, func(ctx context.Context, cmp clientv3.Cmp, then, els []clientv3.Op) (*clientv3.TxnResponse, error) {
		resp, held, err := etcdtxn.Release(ctx, ec, ev.Lock, leaseID, token, []clientv3.Cmp{cmp}, then, els)
		switch {
		case resp != nil && resp.Succeeded:
			done, relErr = true, err
			return resp, nil
		case err != nil:
			return nil, err
		case !held:
			return nil, errNotHeld
		}
		return resp, nil // another writer came first: its head is in the answers
	})
	if done {
		return true, relErr
	}
	if errors.Is(err, errNotHeld) {
		err = nil
	}
	return false, err
}
