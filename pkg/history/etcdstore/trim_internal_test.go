package etcdstore

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fence-dev/fence/internal/etcdtest"
	"github.com/fence-dev/fence/pkg/history"
	"github.com/fence-dev/fence/pkg/history/historytest"
)

// TestTrimFirst: the decisions of a write about the first event it keeps,
// by the count bound and the age bound, and whether it must read further.
func TestTrimFirst(t *testing.T) {
	cut := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	old, young := cut.Add(-time.Hour), cut.Add(time.Hour)
	ents := func(from uint64, times ...time.Time) []history.Entry {
		var out []history.Entry
		for i, at := range times {
			out = append(out, history.Entry{Seq: from + uint64(i), Event: history.Event{Time: at}})
		}
		return out
	}
	for _, tc := range []struct {
		name   string
		h      head
		last   uint64
		max    int
		oldest []history.Entry
		limit  int
		first  uint64
		readOn bool
	}{
		{"empty history", head{First: 1}, 1, 10, nil, 16, 1, false},
		{"within both bounds", head{Seq: 3, First: 1}, 4, 10, ents(1, young, young, young), 16, 1, false},
		{"count bound", head{Seq: 10, First: 1}, 12, 10, ents(1, young, young), 16, 3, false},
		{"aged oldest go", head{Seq: 5, First: 1}, 6, 10, ents(1, old, old, young), 16, 3, false},
		{"aged and counted", head{Seq: 10, First: 1}, 11, 10, ents(1, old, old, old, young), 16, 4, false},
		{"all read aged, fewer than the limit", head{Seq: 3, First: 1}, 4, 10, ents(1, old, old, old), 16, 4, false},
		{"all read aged, as many as the limit: read on", head{Seq: 9, First: 1}, 10, 20, ents(1, old, old), 2, 3, true},
		{"an aged event after a young one stays", head{Seq: 4, First: 1}, 5, 10, ents(1, young, old, old), 16, 1, false},
		{"events newer than the head are not trimmed", head{Seq: 2, First: 1}, 3, 10, ents(1, old, old, old), 16, 3, false},
		{"strays below first count as gone", head{Seq: 6, First: 4}, 7, 10, ents(2, young, young, old, young), 16, 5, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			first, readOn := trimFirst(tc.h, tc.h.First, tc.last, tc.max, tc.oldest, tc.limit, cut)
			if first != tc.first || readOn != tc.readOn {
				t.Fatalf("trimFirst = %d, %v; want %d, %v", first, readOn, tc.first, tc.readOn)
			}
		})
	}
}

// TestWriteOpsStartAtFirst: a write deletes only the events from the old
// head's first to the new, and reads the oldest kept from the new first:
// neither range starts at the start of the lock's history, where etcd's
// index still holds every deleted event's key until a compaction (a
// long-lived lock's thousands), so that a write costs the same however
// long the lock has lived.
func TestWriteOpsStartAtFirst(t *testing.T) {
	s, err := newStore(nil, "/p/")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name       string
		h, nh      head
		wantDelete bool
	}{
		{"nothing trimmed", head{Seq: 5, First: 1}, head{Seq: 6, First: 1}, false},
		{"trimmed", head{Seq: 5000, First: 4001}, head{Seq: 5002, First: 4003}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vals := make([]string, tc.nh.Seq-tc.h.Seq)
			ops := s.writeOps("l", tc.h, tc.nh, vals)
			deletes := 0
			for _, op := range ops {
				switch {
				case op.IsDelete():
					deletes++
					if string(op.KeyBytes()) != s.key("l", tc.h.First) || string(op.RangeBytes()) != s.key("l", tc.nh.First) {
						t.Fatalf("delete [%s, %s), want [%s, %s)", op.KeyBytes(), op.RangeBytes(), s.key("l", tc.h.First), s.key("l", tc.nh.First))
					}
				case op.IsGet():
					if k := string(op.KeyBytes()); k != s.key("l", tc.nh.First) {
						t.Fatalf("the read of the oldest starts at %s, want %s", k, s.key("l", tc.nh.First))
					}
				}
			}
			if (deletes == 1) != tc.wantDelete || deletes > 1 {
				t.Fatalf("%d deletes, want one: %v", deletes, tc.wantDelete)
			}
			if last := ops[len(ops)-1]; !last.IsGet() || !strings.HasPrefix(string(last.KeyBytes()), s.Range("l")) {
				t.Fatalf("the last op is not the read of the oldest kept")
			}
		})
	}
}

// rangeKV records the start key of every range read or delete it sends,
// in transactions too.
type rangeKV struct {
	clientv3.KV
	mu     sync.Mutex
	starts []string
}

func (k *rangeKV) note(ops ...clientv3.Op) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, op := range ops {
		if len(op.RangeBytes()) > 0 {
			k.starts = append(k.starts, string(op.KeyBytes()))
		}
	}
}

func (k *rangeKV) Get(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	k.note(clientv3.OpGet(key, opts...))
	return k.KV.Get(ctx, key, opts...)
}

func (k *rangeKV) Txn(ctx context.Context) clientv3.Txn { return &rangeTxn{Txn: k.KV.Txn(ctx), k: k} }

type rangeTxn struct {
	clientv3.Txn
	k *rangeKV
}

func (t *rangeTxn) If(cs ...clientv3.Cmp) clientv3.Txn { t.Txn = t.Txn.If(cs...); return t }
func (t *rangeTxn) Then(ops ...clientv3.Op) clientv3.Txn {
	t.k.note(ops...)
	t.Txn = t.Txn.Then(ops...)
	return t
}
func (t *rangeTxn) Else(ops ...clientv3.Op) clientv3.Txn {
	t.Txn = t.Txn.Else(ops...) // read only when another writer came first
	return t
}

// TestRecordReadsNoDeletedKeys: what a Recorder's run asks of a lock's
// history (LastLease, then the acquisition's write, then the release's)
// never reads or deletes a range from the start of the lock's history:
// etcd's index keeps the key of every event deleted since its last
// compaction, and such a range walks past all of them (20,000 made a read
// of the 16 oldest events cost 3-4 ms instead of 1). The events past the
// age bound go with the second write, which knows the oldest events.
// Before, LastLease and each write read from the start of the range.
func TestRecordReadsNoDeletedKeys(t *testing.T) {
	srv := etcdtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	p := newPrefix()
	clk := historytest.NewClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	opts := []history.Option{historytest.WithMaxEvents(10), historytest.WithMaxAge(time.Hour), historytest.WithClock(clk.Now)}
	w, err := newStore(srv.Client(t), p, opts...)
	if err != nil {
		t.Fatal(err)
	}
	later := clk.Now().Add(2 * time.Hour)
	for i := uint64(1); i <= 12; i++ { // two deleted by the count bound
		at := clk.Now()
		if i == 12 {
			at = later
		}
		if err := w.Record(ctx, history.Event{Time: at, Lock: "l", Kind: history.Acquired, Holder: "h", Token: i}); err != nil {
			t.Fatal(err)
		}
	}
	clk.Advance(2 * time.Hour) // 3 to 11 are now past the age bound
	c := srv.Client(t)
	rk := &rangeKV{KV: c.KV}
	c.KV = rk
	s, err := newStore(c, p, opts...)
	if err != nil {
		t.Fatal(err)
	}
	if ev, ok, err := s.LastLease(ctx, "l", 32); err != nil || !ok || ev.Token != 12 {
		t.Fatalf("LastLease = %+v, %v, %v; want token 12", ev, ok, err)
	}
	for _, kind := range []history.Kind{history.Acquired, history.Released} {
		if err := s.Record(ctx, history.Event{Time: clk.Now(), Lock: "l", Kind: kind, Holder: "h", Token: 13}); err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range rk.starts {
		if k == s.Range("l") {
			t.Fatalf("a range from the start of the lock's history was read or deleted (ranges from %q)", rk.starts)
		}
	}
	resp, err := srv.Client(t).Get(ctx, s.Range("l"), clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	// Kept: 12, 13 and 14 (3 went by the count bound, 4 to 11 by the age
	// bound, with the second write).
	if len(resp.Kvs) != 3 || string(resp.Kvs[0].Key) != s.key("l", 12) {
		var keys []string
		for _, kv := range resp.Kvs {
			keys = append(keys, string(kv.Key))
		}
		t.Fatalf("kept %q; want events 12 to 14", keys)
	}
}
