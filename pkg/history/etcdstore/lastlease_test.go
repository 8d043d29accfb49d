package etcdstore

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/fence-dev/fence/internal/etcdtest"
	"github.com/fence-dev/fence/pkg/history"
	"github.com/fence-dev/fence/pkg/history/historytest"
	hopts "github.com/fence-dev/fence/pkg/history/internal/opts"
)

// lastLeaseOfLatest is what the Recorder found before LastLease: a scan of
// Latest(lock, n) from its end for the last lease event.
func lastLeaseOfLatest(t rapid.TB, s *store, lock string, n int) (history.Event, bool) {
	evs, err := s.Latest(context.Background(), lock, n)
	if err != nil {
		t.Fatalf("Latest: %v", err)
	}
	for i := len(evs) - 1; i >= 0; i-- {
		if hopts.OfLease(string(evs[i].Kind)) {
			return evs[i], true
		}
	}
	return history.Event{}, false
}

// TestLastLeaseAgreesWithLatest: whatever was written (events of every
// kind, in batches, by two stores, at times that go back past the age
// bound, with heads rewritten as an older fence writes them, without the
// lease event), LastLease(n) finds the event a scan of Latest(n) finds,
// for a store new to the lock and for the writer.
func TestLastLeaseAgreesWithLatest(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := srv.Client(t)
	kinds := []history.Kind{history.Acquired, history.Released, history.Revoked, history.Expired,
		history.RenewalFailed, history.LeaseLost, history.DeadlineExceeded, history.StaleRefused, history.Completed}
	rapid.Check(t, func(t *rapid.T) {
		ctx := context.Background()
		p := newPrefix()
		clk := historytest.NewClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
		opts := []history.Option{
			historytest.WithMaxEvents(rapid.IntRange(1, 12).Draw(t, "maxEvents")),
			historytest.WithMaxAge(time.Hour), historytest.WithClock(clk.Now),
		}
		mk := func() *store {
			s, err := newStore(cli, p, opts...)
			if err != nil {
				t.Fatal(err)
			}
			return s
		}
		writers := []*store{mk(), mk()}
		token := uint64(0)
		for step := range rapid.IntRange(1, 16).Draw(t, "steps") {
			switch rapid.IntRange(0, 5).Draw(t, fmt.Sprint("action", step)) {
			case 0: // an older fence's write: the head without its lease event
				resp, err := cli.Get(ctx, writers[0].HeadKey("l"))
				if err != nil {
					t.Fatal(err)
				}
				if len(resp.Kvs) == 1 {
					var h head
					if err := json.Unmarshal(resp.Kvs[0].Value, &h); err != nil {
						t.Fatal(err)
					}
					h.Lease = nil
					b, _ := json.Marshal(h)
					if _, err := cli.Put(ctx, writers[0].HeadKey("l"), string(b)); err != nil {
						t.Fatal(err)
					}
				}
			case 1:
				clk.Advance(time.Duration(rapid.IntRange(1, 90).Draw(t, fmt.Sprint("minutes", step))) * time.Minute)
			default:
				w := writers[rapid.IntRange(0, 1).Draw(t, fmt.Sprint("writer", step))]
				var evs []history.Event
				for i := range rapid.IntRange(1, 3).Draw(t, fmt.Sprint("batch", step)) {
					token++
					at := clk.Now().Add(-time.Duration(rapid.IntRange(0, 80).Draw(t, fmt.Sprint("age", step, i))) * time.Minute)
					kind := rapid.SampledFrom(kinds).Draw(t, fmt.Sprint("kind", step, i))
					evs = append(evs, history.Event{Time: at, Lock: "l", Kind: kind, Holder: "h", Token: token})
				}
				if err := w.Append(ctx, evs); err != nil {
					t.Fatal(err)
				}
			}
			for _, n := range []int{1, 3, 32, 0} {
				want, wantOK := lastLeaseOfLatest(t, mk(), "l", n)
				for _, s := range []*store{mk(), writers[0]} {
					got, ok, err := s.LastLease(ctx, "l", n)
					if err != nil {
						t.Fatalf("LastLease(%d): %v", n, err)
					}
					if ok != wantOK || ok && (got.Kind != want.Kind || got.Token != want.Token || !got.Time.Equal(want.Time)) {
						t.Fatalf("step %d: LastLease(%d) = %+v, %v; a scan of Latest finds %+v, %v", step, n, got, ok, want, wantOK)
					}
				}
			}
		}
	})
}

// TestLastLeaseReadsTheHead: once a write of this version carried the
// lease event in the head, LastLease is one request, whose reads do not
// depend on the length of the history (not Latest's read of the newest
// events, which etcd sorts from the whole range); from a head an older
// fence wrote, it reads the long way (two requests), and the next write
// puts the event back.
func TestLastLeaseReadsTheHead(t *testing.T) {
	srv := etcdtest.Start(t)
	cli, kv := counted(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	p := newPrefix()
	w, err := newStore(srv.Client(t), p)
	if err != nil {
		t.Fatal(err)
	}
	for i := uint64(1); i <= 40; i++ {
		kind := history.Acquired
		if i%4 == 0 {
			kind = history.RenewalFailed // not a lease event: the head keeps the last one
		}
		if err := w.Record(ctx, history.Event{Time: time.Now(), Lock: "l", Kind: kind, Holder: "h", Token: i}); err != nil {
			t.Fatal(err)
		}
	}
	cost := func() (history.Event, int64) {
		t.Helper()
		s, err := newStore(cli, p)
		if err != nil {
			t.Fatal(err)
		}
		before := kv.n.Load()
		ev, ok, err := s.LastLease(ctx, "l", 32)
		if err != nil || !ok {
			t.Fatalf("LastLease = %+v, %v, %v", ev, ok, err)
		}
		return ev, kv.n.Load() - before
	}
	if ev, n := cost(); n != 1 || ev.Token != 39 {
		t.Fatalf("LastLease found token %d in %d requests; want 39 (the last acquired) in 1", ev.Token, n)
	}
	// An older fence's write drops the head's lease event.
	resp, err := cli.Get(ctx, w.HeadKey("l"))
	if err != nil {
		t.Fatal(err)
	}
	var h head
	if err := json.Unmarshal(resp.Kvs[0].Value, &h); err != nil || len(h.Lease) == 0 {
		t.Fatalf("head %s (%v): want a lease event in it", resp.Kvs[0].Value, err)
	}
	b, _ := json.Marshal(head{Seq: h.Seq, First: h.First})
	if _, err := cli.Put(ctx, w.HeadKey("l"), string(b)); err != nil {
		t.Fatal(err)
	}
	if ev, n := cost(); n != 2 || ev.Token != 39 {
		t.Fatalf("from a head without a lease event, LastLease found token %d in %d requests; want 39 in 2 (the head, then Latest)", ev.Token, n)
	}
	if err := w.Record(ctx, history.Event{Time: time.Now(), Lock: "l", Kind: history.Released, Holder: "h", Token: 39}); err != nil {
		t.Fatal(err)
	}
	if ev, n := cost(); n != 1 || ev.Kind != history.Released {
		t.Fatalf("after a write, LastLease found %s in %d requests; want released in 1", ev.Kind, n)
	}
}

// BenchmarkLastLease1000: the look at a lock's last lease event before an
// acquisition is recorded, by a store new to the lock (a new `fence run`),
// on a lock with 1,000 events: from the head (LastLease), and the way it
// was before (a scan of Latest, which etcd answers by sorting the range).
func BenchmarkLastLease1000(b *testing.B) {
	srv := etcdtest.Start(b)
	cli := srv.Client(b)
	ctx := context.Background()
	p := newPrefix()
	w, err := newStore(cli, p)
	if err != nil {
		b.Fatal(err)
	}
	for i := range uint64(1000) {
		if err := w.Record(ctx, history.Event{Time: time.Now(), Lock: "l", Kind: history.Acquired, Holder: "h", Token: i + 1}); err != nil {
			b.Fatal(err)
		}
	}
	for _, bc := range []struct {
		name string
		look func(s *store) error
	}{
		{"head", func(s *store) error { _, _, err := s.LastLease(ctx, "l", 32); return err }},
		{"latest", func(s *store) error { _, err := s.Latest(ctx, "l", 32); return err }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				s, err := newStore(cli, p)
				if err != nil {
					b.Fatal(err)
				}
				if err := bc.look(s); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
