package store

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fence-dev/fence/pkg/coord"
	"pgregory.net/rapid"
)

var t0 = time.Date(2026, 3, 14, 15, 9, 26, 0, time.UTC)

func heldInfo(name string, token uint64, ttl, left time.Duration) coord.LockInfo {
	return coord.LockInfo{Name: name, Held: true, Holder: "h-" + name, Token: token, LeaseID: fmt.Sprint("l", token),
		TTL: ttl, TTLLeft: left, AcquiredAt: t0.Add(-time.Duration(token) * time.Second)}
}

func names(rows []*Row) []string {
	out := make([]string, len(rows))
	for i, r := range rows {
		out[i] = r.Info.Name
	}
	return out
}

// TestOrderInvariant drives the store with random changes and checks after
// each one that the incremental order equals a full sort and filter of the
// rows, for every sort key and direction.
func TestOrderInvariant(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := New()
		now := t0
		nameGen := rapid.SampledFrom([]string{"a", "b", "c", "d", "e", "f", "g", "h", "ab", "ba", "x/y"})
		t.Repeat(map[string]func(*rapid.T){
			"apply": func(t *rapid.T) {
				n := rapid.IntRange(0, 80).Draw(t, "n") // 0: the clock moves alone
				var cs []coord.Event
				for range n {
					name := nameGen.Draw(t, "name")
					var info coord.LockInfo
					if rapid.Bool().Draw(t, "held") {
						info = heldInfo(name, uint64(rapid.IntRange(1, 5).Draw(t, "token")), 15*time.Second,
							time.Duration(rapid.IntRange(0, 15).Draw(t, "left"))*time.Second)
					} else {
						info = coord.LockInfo{Name: name}
					}
					info.Waiters = rapid.IntRange(0, 2).Draw(t, "waiters")
					ev := coord.Event{Info: info}
					if rapid.Bool().Draw(t, "renewed") {
						ev.Type = coord.EventRenewed
					}
					cs = append(cs, ev)
				}
				// Read later than the last change: the clock moves
				// with the changes (and without any, n = 0).
				now = now.Add(time.Duration(rapid.IntRange(0, 3).Draw(t, "later")) * time.Second)
				s.Apply(now, cs...)
			},
			"remove": func(t *rapid.T) { s.Remove(nameGen.Draw(t, "name")) },
			"counts": func(t *rapid.T) {
				s.SetCounts(nameGen.Draw(t, "name"), rapid.IntRange(-1, 3).Draw(t, "f"), rapid.IntRange(-1, 3).Draw(t, "s"), now)
			},
			"sort": func(t *rapid.T) {
				s.SetSort(SortKey(rapid.IntRange(0, int(numSortKeys)-1).Draw(t, "key")), rapid.Bool().Draw(t, "rev"), now)
			},
			"filter": func(t *rapid.T) { s.SetFilter(rapid.SampledFrom([]string{"", "a", "B", "h-", "/"}).Draw(t, "f")) },
			"tick": func(t *rapid.T) {
				now = now.Add(time.Duration(rapid.IntRange(0, 6).Draw(t, "d")) * time.Second)
				s.Tick(now)
			},
			"replace": func(t *rapid.T) {
				var infos []coord.LockInfo
				for _, n := range rapid.SliceOfDistinct(nameGen, func(s string) string { return s }).Draw(t, "names") {
					infos = append(infos, heldInfo(n, 3, 15*time.Second, 10*time.Second))
				}
				s.Replace(now, infos)
			},
			"": func(t *rapid.T) {
				var want []*Row
				for _, r := range s.rows {
					if s.matches(r) {
						want = append(want, r)
					}
				}
				slices.SortFunc(want, s.cmp)
				if got := names(s.Rows()); !slices.Equal(got, names(want)) {
					t.Fatalf("rows %v, want %v (sort %v rev %v filter %q)", got, names(want), s.key, s.reverse, s.filter)
				}
				var tot Totals
				for _, r := range s.rows {
					tot.Locks++
					switch r.State(now) {
					case Held:
						tot.Held++
					case Expiring:
						tot.Held++
						tot.Expiring++
					}
					tot.Waiters += r.Info.Waiters
				}
				if got := s.Totals(); got != tot {
					t.Fatalf("totals %+v, counted %+v", got, tot)
				}
				if len(s.all) != len(s.rows) {
					t.Fatalf("%d sorted rows, %d rows", len(s.all), len(s.rows))
				}
				for _, r := range s.Rows() {
					if i := s.Index(r.Info.Name); i < 0 || s.Rows()[i] != r {
						t.Fatalf("Index(%q) = %d", r.Info.Name, i)
					}
				}
			},
		})
	})
}

func TestStateAndTTL(t *testing.T) {
	s := New()
	s.Apply(t0, coord.Event{Info: heldInfo("a", 1, 15*time.Second, 15*time.Second)})
	r := s.Get("a")
	if got := r.State(t0); got != Held {
		t.Fatalf("state %v, want held", got)
	}
	if got := r.TTLLeft(t0.Add(4 * time.Second)); got != 11*time.Second {
		t.Fatalf("TTL left %v, want 11s", got)
	}
	// Under a third of the TTL left: a renewal is late.
	if got := r.State(t0.Add(10*time.Second + time.Millisecond)); got != Expiring {
		t.Fatalf("state %v, want expiring", got)
	}
	if got := r.TTLLeft(t0.Add(time.Minute)); got != 0 {
		t.Fatalf("TTL left %v after expiry, want 0", got)
	}
	s.Apply(t0, coord.Event{Info: coord.LockInfo{Name: "a", LastToken: 1}})
	if got := r.State(t0); got != Free {
		t.Fatalf("state %v, want free", got)
	}
}

func TestRenewals(t *testing.T) {
	s := New()
	info := heldInfo("a", 1, 15*time.Second, 15*time.Second)
	s.Apply(t0, coord.Event{Info: info})
	// Two renewals reported by the watch.
	s.Apply(t0.Add(5*time.Second), coord.Event{Type: coord.EventRenewed, Info: info})
	s.Apply(t0.Add(10*time.Second), coord.Event{Type: coord.EventRenewed, Info: info})
	// A read with the same expiry is not a renewal; one with an expiry
	// moved on by a renewal period is (etcd shows renewals no other way).
	s.Replace(t0.Add(11*time.Second), []coord.LockInfo{withLeft(info, 14*time.Second)})
	if got := s.Get("a").Renewals; got != 2 {
		t.Fatalf("renewals %d, want 2", got)
	}
	s.Replace(t0.Add(16*time.Second), []coord.LockInfo{withLeft(info, 14*time.Second)})
	if got := s.Get("a").Renewals; got != 3 {
		t.Fatalf("renewals %d, want 3", got)
	}
	// A new lease starts again from zero.
	s.Apply(t0.Add(20*time.Second), coord.Event{Info: heldInfo("a", 2, 15*time.Second, 15*time.Second)})
	if got := s.Get("a").Renewals; got != 0 {
		t.Fatalf("renewals %d after a new lease, want 0", got)
	}
}

func withLeft(i coord.LockInfo, left time.Duration) coord.LockInfo {
	i.TTLLeft = left
	return i
}

func TestSortKeys(t *testing.T) {
	s := New()
	s.Apply(t0,
		coord.Event{Info: heldInfo("old", 1, 15*time.Second, 14*time.Second)},
		coord.Event{Info: heldInfo("late", 9, 15*time.Second, 2*time.Second)},
		coord.Event{Info: coord.LockInfo{Name: "idle", LastToken: 4}},
		coord.Event{Info: heldInfo("mid", 5, 15*time.Second, 8*time.Second)},
	)
	s.SetCounts("mid", 3, 0, t0)
	s.SetCounts("idle", 1, 7, t0)
	cases := []struct {
		key  SortKey
		want string
	}{
		{ByName, "idle late mid old"},
		{ByState, "late mid old idle"},
		{ByTTL, "late mid old idle"},
		{ByHeldFor, "late mid old idle"},
		{ByToken, "late mid idle old"},
		{ByFailures, "mid idle late old"},
		{ByStale, "idle mid late old"},
	}
	for _, c := range cases {
		s.SetSort(c.key, false, t0)
		if got := strings.Join(names(s.Rows()), " "); got != c.want {
			t.Errorf("sort by %v: %s, want %s", c.key, got, c.want)
		}
	}
	s.SetSort(ByName, true, t0)
	if got := strings.Join(names(s.Rows()), " "); got != "old mid late idle" {
		t.Errorf("reverse name sort: %s", got)
	}
}

func TestFilter(t *testing.T) {
	s := New()
	s.Apply(t0, coord.Event{Info: heldInfo("deploy/prod", 1, time.Second, time.Second)}, coord.Event{Info: coord.LockInfo{Name: "db"}})
	s.SetFilter("H-DEPLOY") // the holder, any case
	if got := names(s.Rows()); !slices.Equal(got, []string{"deploy/prod"}) {
		t.Fatalf("filtered rows %v", got)
	}
	if s.Index("db") != -1 {
		t.Fatal("a filtered-out row has an index")
	}
	s.Apply(t0, coord.Event{Info: heldInfo("db", 2, time.Second, time.Second)}) // holder h-db
	s.SetFilter("h-")
	if got := len(s.Rows()); got != 2 {
		t.Fatalf("%d rows match h-, want 2", got)
	}
}

func BenchmarkApplyOne10k(b *testing.B) {
	s := New()
	var cs []coord.Event
	for i := range 10_000 {
		cs = append(cs, coord.Event{Info: heldInfo(fmt.Sprintf("lock-%05d", i), uint64(i+1), 15*time.Second, 10*time.Second)})
	}
	s.Apply(t0, cs...)
	s.SetSort(ByTTL, false, t0)
	b.ResetTimer()
	for i := range b.N {
		c := cs[i%len(cs)]
		c.Info.TTLLeft = time.Duration(i%15) * time.Second
		c.Type = coord.EventRenewed
		s.Apply(t0, c)
	}
}
