package etcdstore

import (
	"strings"
	"testing"
	"time"

	"github.com/fence-dev/fence/pkg/history"
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
