// Package historytest is the conformance suite every history.Store passes:
// the events come back as written, in order, within both bounds (also after
// 10,000 of them), and concurrent writers, goroutines and processes, lose
// none of them. A store that reads a lock's last events on a path of its
// own (Latest, which history.Recorder reads on every acquisition) returns
// what History returns.
//
// Only test code imports it.
package historytest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/history"
	hopts "github.com/fence-dev/fence/pkg/history/internal/opts"
)

// Harness says how to reach the store under test.
type Harness struct {
	// Storage returns an opener of stores on fresh, empty storage: every
	// store it opens, in the same test, shares that storage (as processes
	// sharing a state directory or an etcd prefix). Resources are released
	// by t.Cleanup.
	Storage func(t *testing.T) Opener
	// Stored counts the events the storage physically holds for lock (lines
	// of a file, keys in etcd), including those no read returns any more.
	Stored func(t *testing.T, open Opener, lock string) int
	// Slack is how many events beyond MaxEvents the storage may hold
	// between compactions, as a function of MaxEvents.
	Slack func(maxEvents int) int
	// Events is the number of events the bound tests write (10,000 when
	// zero; at least 2,000 so that both bounds are crossed). A smaller
	// number suits slow runs, such as an embedded etcd under the race
	// detector.
	Events int
	// Spawn, when set, starts a process that writes n events to lock on the
	// storage of open, through WriterMain, with id as their holder. The
	// caller waits for it.
	Spawn func(t *testing.T, open Opener, lock, id string, n int) *exec.Cmd
}

// Opener opens a store on the storage of one test.
type Opener func(opts ...history.Option) history.Store

// Run runs the suite.
func Run(t *testing.T, h Harness) {
	if h.Events == 0 {
		h.Events = 10_000
	}
	if h.Events < 2000 {
		t.Fatalf("historytest: Harness.Events is %d, below 2000", h.Events)
	}
	t.Run("Empty", func(t *testing.T) { testEmpty(t, h) })
	t.Run("RoundTrip", func(t *testing.T) { testRoundTrip(t, h) })
	t.Run("Invalid", func(t *testing.T) { testInvalid(t, h) })
	t.Run("LocksIndependent", func(t *testing.T) { testIndependent(t, h) })
	t.Run("Limit", func(t *testing.T) { testLimit(t, h) })
	t.Run("SinceAndHeads", func(t *testing.T) { testSinceHeads(t, h) })
	t.Run("Reopen", func(t *testing.T) { testReopen(t, h) })
	t.Run("CountBound", func(t *testing.T) { testCountBound(t, h) })
	t.Run("AgeBound", func(t *testing.T) { testAgeBound(t, h) })
	t.Run("ConcurrentGoroutines", func(t *testing.T) { testConcurrent(t, h) })
	t.Run("Latest", func(t *testing.T) { testLatest(t, h) })
	if h.Spawn != nil {
		t.Run("ConcurrentProcesses", func(t *testing.T) { testProcesses(t, h) })
	}
}

// latestReader is a store that reads a lock's last events apart from
// History (history.Recorder looks for it).
type latestReader interface {
	Latest(ctx context.Context, lock string, n int) ([]history.Event, error)
}

// testLatest: Latest(lock, n) returns what History(lock, n) returns, for n
// below, at and beyond the count bound, whether the last events are the
// newest or older ones written last, and as the age bound takes events
// away. A store without Latest skips it.
func testLatest(t *testing.T, h Harness) {
	clk := NewClock(epoch)
	s := h.Storage(t)(WithMaxEvents(150), WithMaxAge(time.Hour), WithClock(clk.Now))
	l, ok := s.(latestReader)
	if !ok {
		t.Skip("the store has no Latest")
	}
	const lock = "latest"
	check := func(when string) {
		t.Helper()
		for _, n := range []int{0, 1, 2, 10, 149, 150, 151, 400} {
			want := mustHistory(t, s, lock, n)
			got, err := l.Latest(ctxT(t), lock, n)
			if err != nil {
				t.Fatalf("%s: Latest(%d): %v", when, n, err)
			}
			if !reflect.DeepEqual(got, want) && (len(got) != 0 || len(want) != 0) {
				t.Fatalf("%s: Latest(%d) = %d events, History(%d) %d:\n%v\n%v", when, n, len(got), n, len(want), got, want)
			}
		}
	}
	check("no history")
	for i := uint64(1); i <= 200; i++ {
		e := ev(lock, history.Released, i, "")
		e.Time = clk.Now()
		if err := s.Record(ctxT(t), e); err != nil {
			t.Fatal(err)
		}
		clk.Advance(10 * time.Second)
		if i%37 == 0 {
			check(fmt.Sprintf("after %d events", i))
		}
	}
	// Events written out of time order: the last ones are old, more of them
	// than a store reading from the end may read at first (the local one
	// reads 4 KiB).
	for i := uint64(201); i <= 260; i++ {
		e := ev(lock, history.Released, i, "")
		e.Time = clk.Now().Add(-59 * time.Minute)
		if err := s.Record(ctxT(t), e); err != nil {
			t.Fatal(err)
		}
	}
	clk.Advance(30 * time.Second)
	check("old events last")
	clk.Advance(30 * time.Minute)
	check("half aged")
	clk.Advance(2 * time.Hour)
	check("all aged")
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// Clock is a settable wall clock for the age bound.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock starts a clock at t.
func NewClock(t time.Time) *Clock { return &Clock{now: t} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

var epoch = time.Date(2030, 1, 2, 3, 4, 5, 6, time.UTC)

func ev(lock string, kind history.Kind, token uint64, holder string) history.Event {
	return history.Event{Lock: lock, Kind: kind, Token: token, Holder: holder}
}

func mustHistory(t *testing.T, s history.Store, lock string, limit int) []history.Event {
	t.Helper()
	evs, err := s.History(ctxT(t), lock, limit)
	if err != nil {
		t.Fatalf("History(%q, %d): %v", lock, limit, err)
	}
	return evs
}

func mustRecord(t *testing.T, s history.Store, e history.Event) {
	t.Helper()
	if err := s.Record(ctxT(t), e); err != nil {
		t.Fatalf("Record(%+v): %v", e, err)
	}
}

func testEmpty(t *testing.T, h Harness) {
	s := h.Storage(t)()
	if evs := mustHistory(t, s, "nothing", 0); len(evs) != 0 {
		t.Fatalf("History of a new lock = %v", evs)
	}
	ents, err := s.Since(ctxT(t), "nothing", 0)
	if err != nil || len(ents) != 0 {
		t.Fatalf("Since = %v, %v", ents, err)
	}
	heads, err := s.Heads(ctxT(t))
	if err != nil || len(heads) != 0 {
		t.Fatalf("Heads = %v, %v", heads, err)
	}
}

// testRoundTrip writes one event of each kind with every field set and reads
// them back equal, oldest first.
func testRoundTrip(t *testing.T, h Harness) {
	clk := NewClock(epoch)
	s := h.Storage(t)(WithClock(clk.Now))
	const lock = "jobs/nightly backup ✓"
	local := time.FixedZone("X", 3600)
	want := []history.Event{
		{Time: epoch.Add(time.Second).In(local), Lock: lock, Kind: history.Acquired, Holder: "h1:42", Token: 7, Wait: 1500 * time.Millisecond},
		{Lock: lock, Kind: history.RenewalFailed, Holder: "h1:42", Token: 7, Count: 3, Error: "context deadline exceeded"},
		{Time: epoch.Add(3 * time.Second), Lock: lock, Kind: history.LeaseLost, Holder: "h1:42", Token: 7, Error: "lease lost"},
		{Time: epoch.Add(4 * time.Second), Lock: lock, Kind: history.DeadlineExceeded, Holder: "h1:42", Token: 7},
		{Time: epoch.Add(5 * time.Second), Lock: lock, Kind: history.Expired, Holder: "h1:42", Token: 7},
		{Time: epoch.Add(6 * time.Second), Lock: lock, Kind: history.Acquired, Holder: "h2", Token: 9},
		{Time: epoch.Add(7 * time.Second), Lock: lock, Kind: history.StaleRefused, Key: "accounts/42", Token: 7, AcceptedToken: 9},
		{Time: epoch.Add(8 * time.Second), Lock: lock, Kind: history.Revoked, Holder: "h2", Token: 9, HeldFor: 2 * time.Second},
		{Time: epoch.Add(9 * time.Second), Lock: lock, Kind: history.Acquired, Holder: "h3", Token: 11},
		{Time: epoch.Add(10 * time.Second), Lock: lock, Kind: history.Released, Holder: "h3", Token: 11, HeldFor: 90 * time.Minute},
	}
	for _, e := range want {
		mustRecord(t, s, e)
	}
	// What comes back: times in UTC, a zero time filled with the clock.
	want[0].Time = want[0].Time.UTC()
	want[1].Time = epoch
	got := mustHistory(t, s, lock, 0)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("History:\n got %+v\nwant %+v", got, want)
	}
	// Long free text is cut, not refused.
	long := strings.Repeat("é", hopts.MaxTextLen)
	mustRecord(t, s, history.Event{Lock: lock, Kind: history.RenewalFailed, Error: long, Holder: long})
	last := mustHistory(t, s, lock, 1)
	if len(last) != 1 || len(last[0].Error) > hopts.MaxTextLen || len(last[0].Holder) > hopts.MaxTextLen ||
		!strings.HasPrefix(long, strings.TrimSuffix(last[0].Error, "…")) {
		t.Fatalf("long text stored as %+v", last)
	}
}

func testInvalid(t *testing.T, h Harness) {
	s := h.Storage(t)()
	bad := []history.Event{
		{Lock: "", Kind: history.Acquired},
		{Lock: "a\nb", Kind: history.Acquired},
		{Lock: strings.Repeat("x", coord.MaxNameLen+1), Kind: history.Acquired},
		{Lock: "ok", Kind: "bogus"},
		{Lock: "ok", Kind: ""},
		{Lock: "ok", Kind: history.Acquired, Wait: -time.Second},
		{Lock: "ok", Kind: history.RenewalFailed, Count: -1},
		{Lock: "ok", Kind: history.StaleRefused, Key: "bad\x00key"},
		// No coordinator issues a token above coord.MaxToken (2^63-1).
		{Lock: "ok", Kind: history.Acquired, Token: coord.MaxToken + 1},
		{Lock: "ok", Kind: history.StaleRefused, Key: "k", Token: 1, AcceptedToken: 1<<64 - 1},
		{Lock: "ok", Kind: history.Acquired, Token: 1, LeaseID: "a\nb"},
		{Lock: "ok", Kind: history.Acquired, Token: 1, LeaseID: strings.Repeat("f", 257)},
	}
	for _, e := range bad {
		if err := s.Record(ctxT(t), e); !errors.Is(err, coord.ErrInvalid) {
			t.Errorf("Record(%+v) = %v, want ErrInvalid", e, err)
		}
	}
	// A batch with one bad event writes none of that lock's events.
	err := s.Append(ctxT(t), []history.Event{ev("ok", history.Acquired, 1, "h"), {Lock: "ok", Kind: "bogus"}})
	if !errors.Is(err, coord.ErrInvalid) {
		t.Errorf("Append with a bad event = %v", err)
	}
	if evs := mustHistory(t, s, "ok", 0); len(evs) != 0 {
		t.Errorf("events written by refused calls: %v", evs)
	}
	if _, err := s.History(ctxT(t), "a\x00", 0); !errors.Is(err, coord.ErrInvalid) {
		t.Errorf("History(bad name) = %v", err)
	}
	if _, err := s.Since(ctxT(t), "", 0); !errors.Is(err, coord.ErrInvalid) {
		t.Errorf("Since(bad name) = %v", err)
	}
	// Bad options.
	if _, err := hopts.New(WithMaxEvents(-1)); !errors.Is(err, coord.ErrInvalid) {
		t.Errorf("negative max events: %v", err)
	}
}

// testIndependent checks that names that are prefixes of each other, and
// odd names, keep separate histories.
func testIndependent(t *testing.T, h Harness) {
	s := h.Storage(t)()
	names := []string{"a", "a/b", "a/", "ab", "/", ".", "..", "%2F", "a%2Fb", "sp ace", "ünï", "x.y", ".hidden",
		strings.Repeat("L", coord.MaxNameLen), strings.Repeat("/", coord.MaxNameLen), strings.Repeat("é", coord.MaxNameLen/2)}
	for i, n := range names {
		for j := 0; j <= i%3; j++ {
			mustRecord(t, s, ev(n, history.Acquired, uint64(100*i+j+1), n))
		}
	}
	for i, n := range names {
		evs := mustHistory(t, s, n, 0)
		if len(evs) != i%3+1 {
			t.Fatalf("%q: %d events, want %d", n, len(evs), i%3+1)
		}
		for j, e := range evs {
			if e.Lock != n || e.Holder != n || e.Token != uint64(100*i+j+1) {
				t.Fatalf("%q: event %d = %+v", n, j, e)
			}
		}
	}
	heads, err := s.Heads(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(heads) != len(names) {
		t.Fatalf("Heads: %d locks, want %d: %v", len(heads), len(names), heads)
	}
	for _, hd := range heads {
		for i, n := range names {
			if n == hd.Lock && hd.Seq != uint64(i%3+1) {
				t.Errorf("head of %q = %d, want %d", n, hd.Seq, i%3+1)
			}
		}
	}
}

func testLimit(t *testing.T, h Harness) {
	s := h.Storage(t)()
	for i := 1; i <= 10; i++ {
		mustRecord(t, s, ev("l", history.Acquired, uint64(i), ""))
	}
	for _, tc := range []struct{ limit, n, first int }{{0, 10, 1}, {1, 1, 10}, {3, 3, 8}, {10, 10, 1}, {50, 10, 1}, {-1, 10, 1}} {
		evs := mustHistory(t, s, "l", tc.limit)
		if len(evs) != tc.n || evs[0].Token != uint64(tc.first) || evs[len(evs)-1].Token != 10 {
			t.Errorf("History(limit %d) = %d events from %d", tc.limit, len(evs), evs[0].Token)
		}
	}
}

func testSinceHeads(t *testing.T, h Harness) {
	s := h.Storage(t)()
	var cursor uint64
	total := 0
	for round := 1; round <= 4; round++ {
		var batch []history.Event
		for i := 0; i < round; i++ {
			batch = append(batch, ev("s", history.StaleRefused, uint64(total+i+1), ""))
		}
		if err := s.Append(ctxT(t), batch); err != nil {
			t.Fatal(err)
		}
		ents, err := s.Since(ctxT(t), "s", cursor)
		if err != nil {
			t.Fatal(err)
		}
		if len(ents) != round {
			t.Fatalf("round %d: Since(%d) = %d entries", round, cursor, len(ents))
		}
		for i, e := range ents {
			if e.Seq <= cursor || (i > 0 && e.Seq != ents[i-1].Seq+1) || e.Event.Token != uint64(total+i+1) {
				t.Fatalf("round %d: entry %d = %+v after cursor %d", round, i, e, cursor)
			}
		}
		total += round
		cursor = ents[len(ents)-1].Seq
		heads, err := s.Heads(ctxT(t))
		if err != nil || len(heads) != 1 || heads[0] != (history.Head{Lock: "s", Seq: cursor}) {
			t.Fatalf("Heads = %v, %v; want s at %d", heads, err, cursor)
		}
	}
	if ents, err := s.Since(ctxT(t), "s", cursor); err != nil || len(ents) != 0 {
		t.Fatalf("Since(head) = %v, %v", ents, err)
	}
}

func testReopen(t *testing.T, h Harness) {
	open := h.Storage(t)
	s1 := open()
	mustRecord(t, s1, ev("r", history.Acquired, 1, "one"))
	s2 := open()
	mustRecord(t, s2, ev("r", history.Released, 1, "one"))
	mustRecord(t, s1, ev("r", history.Acquired, 2, "two"))
	for _, s := range []history.Store{s1, s2, open()} {
		ents, err := s.Since(ctxT(t), "r", 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(ents) != 3 || ents[0].Seq != 1 || ents[2].Seq != 3 || ents[2].Event.Holder != "two" {
			t.Fatalf("after reopen: %+v", ents)
		}
	}
}

// testCountBound writes h.Events (10,000) events to one lock with the
// default bounds: the last 1,000 are kept, in order, and the storage holds
// no more than the bound plus the store's slack, all along.
func testCountBound(t *testing.T, h Harness) {
	open := h.Storage(t)
	s := open()
	total := h.Events
	const lock = "busy"
	maxStored := hopts.MaxEvents + h.Slack(hopts.MaxEvents)
	written := 0
	// Single events and batches of varying size, so that the bound is
	// crossed by writes of every shape.
	for written < total {
		n := 1 // one by one across the bound
		switch {
		case written < 1000:
			n = 25
		case written < 1100:
		case written/1000%3 == 0:
			n = 50
		case written/1000%3 == 1:
			n = 25
		default:
			n = 150 // more than one etcd transaction
		}
		n = min(n, total-written)
		batch := make([]history.Event, n)
		for i := range batch {
			written++
			batch[i] = ev(lock, history.Acquired, uint64(written), "w")
		}
		if err := s.Append(ctxT(t), batch); err != nil {
			t.Fatalf("after %d events: %v", written, err)
		}
		if written%2000 < n {
			if got := h.Stored(t, open, lock); got > maxStored {
				t.Fatalf("after %d events the storage holds %d, more than %d", written, got, maxStored)
			}
		}
	}
	evs := mustHistory(t, s, lock, 0)
	if len(evs) != hopts.MaxEvents {
		t.Fatalf("History keeps %d events, want %d", len(evs), hopts.MaxEvents)
	}
	for i, e := range evs {
		if want := uint64(total - hopts.MaxEvents + i + 1); e.Token != want {
			t.Fatalf("event %d has token %d, want %d", i, e.Token, want)
		}
	}
	if got := h.Stored(t, open, lock); got > maxStored {
		t.Fatalf("the storage holds %d events, more than %d", got, maxStored)
	}
	ents, err := s.Since(ctxT(t), lock, 0)
	if err != nil || len(ents) != hopts.MaxEvents || ents[len(ents)-1].Seq != uint64(total) {
		t.Fatalf("Since(0) = %d entries up to %v, %v", len(ents), ents[len(ents)-1].Seq, err)
	}
}

// testAgeBound writes h.Events (10,000) events, a thousand per simulated
// hour, with a one-hour age bound and a count bound that is not reached:
// only the last hour's events are returned, and the storage holds little
// more.
func testAgeBound(t *testing.T, h Harness) {
	clk := NewClock(epoch)
	open := h.Storage(t)
	const maxAge = time.Hour
	opts := []history.Option{WithClock(clk.Now), WithMaxAge(maxAge), WithMaxEvents(5000)}
	s := open(opts...)
	total := h.Events
	const step = 3600 * time.Millisecond // 1000 events per hour
	const lock = "aging"
	for i := 1; i <= total; {
		n := 50 // one by one across the first hour's end
		if i > 1000 && i <= 1100 {
			n = 1
		}
		batch := make([]history.Event, n)
		for j := range batch {
			batch[j] = ev(lock, history.Released, uint64(i), "")
			batch[j].Time = clk.Now()
			clk.Advance(step)
			i++
		}
		if err := s.Append(ctxT(t), batch); err != nil {
			t.Fatalf("after %d events: %v", i, err)
		}
	}
	clk.Advance(-step)
	evs := mustHistory(t, s, lock, 0)
	cut := clk.Now().Add(-maxAge)
	if len(evs) < 990 || len(evs) > 1001 {
		t.Fatalf("History keeps %d events of the last hour, want about 1000", len(evs))
	}
	for _, e := range evs {
		if e.Time.Before(cut) {
			t.Fatalf("event at %v is older than the cutoff %v", e.Time, cut)
		}
	}
	if evs[len(evs)-1].Token != uint64(total) {
		t.Fatalf("last event %d, want %d", evs[len(evs)-1].Token, total)
	}
	// Storage: the hour's events plus what the store may leave to trim.
	if got := h.Stored(t, open, lock); got > 1001+h.Slack(5000) {
		t.Fatalf("the storage holds %d events, more than an hour's worth and slack", got)
	}
	// An event already past the bound is not kept.
	old := ev(lock, history.Released, 1, "")
	old.Time = cut.Add(-time.Minute)
	mustRecord(t, s, old)
	if again := mustHistory(t, s, lock, 0); again[len(again)-1].Token != uint64(total) {
		t.Fatalf("an event past the age bound was kept: %+v", again[len(again)-1])
	}
	// Time passes with no writes: reads apply the bound themselves.
	clk.Advance(maxAge + time.Second)
	if evs := mustHistory(t, open(opts...), lock, 0); len(evs) != 0 {
		t.Fatalf("%d events returned after they all aged out", len(evs))
	}
	mustRecord(t, s, ev(lock, history.Acquired, uint64(total)+1, ""))
	if got := h.Stored(t, open, lock); got > 1+h.Slack(5000) {
		t.Fatalf("after everything aged out and one write, the storage holds %d", got)
	}
	ents, err := s.Since(ctxT(t), lock, 0)
	if err != nil || len(ents) != 1 || ents[0].Seq <= uint64(total) {
		t.Fatalf("Since after aging = %+v, %v (sequence numbers must go on)", ents, err)
	}
}

// testConcurrent has goroutines, each with its own store on the same
// storage and half of them sharing one, write to two locks at once: every
// event is kept once, in each writer's order.
func testConcurrent(t *testing.T, h Harness) {
	open := h.Storage(t)
	shared := open()
	const writers, each = 6, 30
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := 0; w < writers; w++ {
		s := shared
		if w%2 == 0 {
			s = open()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			count := map[string]int{}
			for i := 1; i <= each; i++ {
				lock := []string{"c1", "c2"}[i%2]
				count[lock]++
				e := ev(lock, history.RenewalFailed, uint64(i), fmt.Sprintf("w%d", w))
				e.Count = count[lock]
				if err := s.Record(context.Background(), e); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for _, lock := range []string{"c1", "c2"} {
		checkAll(t, shared, lock, writers, each/2)
	}
}

// testProcesses has processes write to one lock at once.
func testProcesses(t *testing.T, h Harness) {
	open := h.Storage(t)
	const procs, each = 4, 40
	var cmds []*exec.Cmd
	for p := 0; p < procs; p++ {
		cmd := h.Spawn(t, open, "shared", fmt.Sprintf("w%d", p), each)
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, cmd)
	}
	// This process writes too.
	s := open()
	for i := 1; i <= each; i++ {
		e := ev("shared", history.RenewalFailed, uint64(i), fmt.Sprintf("w%d", procs))
		e.Count = i
		mustRecord(t, s, e)
	}
	for _, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Fatalf("writer process: %v", err)
		}
	}
	checkAll(t, s, "shared", procs+1, each)
}

// checkAll checks that lock holds, for writers w0..w(n-1), the events with
// counts 1..each in order, and nothing else; sequence numbers increase.
func checkAll(t *testing.T, s history.Store, lock string, writers, each int) {
	t.Helper()
	ents, err := s.Since(ctxT(t), lock, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != writers*each {
		t.Fatalf("%s: %d events, want %d", lock, len(ents), writers*each)
	}
	next := map[string]int{}
	for i, e := range ents {
		if i > 0 && e.Seq != ents[i-1].Seq+1 {
			t.Fatalf("%s: sequence %d follows %d", lock, e.Seq, ents[i-1].Seq)
		}
		w := e.Event.Holder
		next[w]++
		if e.Event.Count != next[w] {
			t.Fatalf("%s: writer %s: event %d has count %d", lock, w, next[w], e.Event.Count)
		}
	}
	if len(next) != writers {
		t.Fatalf("%s: events of %d writers, want %d", lock, len(next), writers)
	}
}

// WriterEnv names the environment variables through which Spawn passes its
// arguments to WriterMain.
const (
	EnvLock = "FENCE_HISTORYTEST_LOCK"
	EnvID   = "FENCE_HISTORYTEST_ID"
	EnvN    = "FENCE_HISTORYTEST_N"
)

// WriterEnv returns the environment for a writer process.
func WriterEnv(lock, id string, n int) []string {
	return []string{EnvLock + "=" + lock, EnvID + "=" + id, EnvN + "=" + strconv.Itoa(n)}
}

// WriterMain is the body of a writer process: it writes the events Spawn
// asked for to s and returns the exit code.
func WriterMain(s history.Store) int {
	n, _ := strconv.Atoi(os.Getenv(EnvN))
	lock, id := os.Getenv(EnvLock), os.Getenv(EnvID)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for i := 1; i <= n; i++ {
		e := ev(lock, history.RenewalFailed, uint64(i), id)
		e.Count = i
		if err := s.Record(ctx, e); err != nil {
			fmt.Fprintln(os.Stderr, "writer:", err)
			return 1
		}
	}
	return 0
}
