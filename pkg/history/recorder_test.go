package history_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fence-dev/fence/internal/etcdtest"
	"github.com/fence-dev/fence/internal/syncbuf"
	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/coord/etcd"
	"github.com/fence-dev/fence/pkg/coord/local"
	"github.com/fence-dev/fence/pkg/history"
	"github.com/fence-dev/fence/pkg/history/etcdstore"
	"github.com/fence-dev/fence/pkg/history/localstore"
)

// backend opens Recorders on one coordinator's storage: each call is a new
// client, as another process would open.
type backend struct {
	name     string
	open     func(t *testing.T) history.Recorder
	shortTTL time.Duration
	attaches bool // AttachProcess reaches the backend
}

var prefixes atomic.Int64

func backends(t *testing.T) []backend {
	dir := filepath.Join(t.TempDir(), "state")
	srv := etcdtest.Start(t)
	prefix := fmt.Sprintf("/r%d/", prefixes.Add(1))
	return []backend{
		{
			name: "local",
			open: func(t *testing.T) history.Recorder {
				c, err := local.Open(dir)
				if err != nil {
					t.Fatal(err)
				}
				s, err := localstore.Open(dir)
				if err != nil {
					t.Fatal(err)
				}
				r := history.Wrap(c, s)
				t.Cleanup(func() { r.Close() })
				return r
			},
			shortTTL: 300 * time.Millisecond,
			attaches: true,
		},
		{
			name: "etcd",
			open: func(t *testing.T) history.Recorder {
				c, err := etcd.New(context.Background(), srv.Endpoints(), etcd.WithPrefix(prefix))
				if err != nil {
					t.Fatal(err)
				}
				ec := c.(interface { // the etcd coordinator's
					Client() *clientv3.Client
					Prefix() string
				})
				s, err := etcdstore.New(ec.Client(), ec.Prefix())
				if err != nil {
					t.Fatal(err)
				}
				r := history.Wrap(c, s)
				t.Cleanup(func() { r.Close() })
				return r
			},
			shortTTL: time.Second,
		},
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// kinds renders a lock's history as "kind:holder:token" items.
func kinds(t *testing.T, h history.Store, lock string) string {
	t.Helper()
	evs, err := h.History(ctxT(t), lock, 0)
	if err != nil {
		t.Fatalf("History(%q): %v", lock, err)
	}
	var out []string
	for _, e := range evs {
		out = append(out, fmt.Sprintf("%s:%s:%d", e.Kind, e.Holder, e.Token))
	}
	return strings.Join(out, " ")
}

func acquire(t *testing.T, c coord.Coordinator, lock, holder string, ttl time.Duration) *coord.Lease {
	t.Helper()
	l, err := c.Acquire(ctxT(t), lock, coord.AcquireOptions{TTL: ttl, Holder: holder, Wait: coord.WaitForever})
	if err != nil {
		t.Fatalf("Acquire(%q) by %s: %v", lock, holder, err)
	}
	return l
}

// waitFree waits (a hang guard, not a timing assertion) until lock is free.
func waitFree(t *testing.T, c coord.Coordinator, lock string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		info, err := c.Inspect(ctxT(t), lock)
		if err != nil {
			t.Fatal(err)
		}
		if !info.Held {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s still held by %s", lock, info.Holder)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestRecorder(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			t.Run("AcquireRelease", func(t *testing.T) { testAcquireRelease(t, b) })
			t.Run("WaitTime", func(t *testing.T) { testWaitTime(t, b) })
			t.Run("Revoke", func(t *testing.T) { testRevoke(t, b) })
			t.Run("ExpiredAndTakenOver", func(t *testing.T) { testTakeover(t, b) })
			t.Run("ExpiredFoundAtRelease", func(t *testing.T) { testExpiredAtRelease(t, b) })
			t.Run("ExpiredFoundWhenFree", func(t *testing.T) { testExpiredWhenFree(t, b) })
			t.Run("ReleaseFromAnotherProcess", func(t *testing.T) { testCrossProcess(t, b) })
			t.Run("LapsedReleasedFromAnotherProcess", func(t *testing.T) { testLapsedCrossProcess(t, b) })
			t.Run("RecordByOthers", func(t *testing.T) { testRecordByOthers(t, b) })
			t.Run("PassThrough", func(t *testing.T) { testPassThrough(t, b) })
		})
	}
}

func testAcquireRelease(t *testing.T, b backend) {
	r := b.open(t)
	l := acquire(t, r, "ar", "alice", 10*time.Second)
	if got, want := kinds(t, r, "ar"), fmt.Sprintf("acquired:alice:%d", l.Token); got != want {
		t.Fatalf("after Acquire: %s, want %s", got, want)
	}
	time.Sleep(20 * time.Millisecond)
	if err := r.Release(ctxT(t), "ar", l.ID); err != nil {
		t.Fatal(err)
	}
	// Releasing again (the lease is gone) records nothing more.
	if err := r.Release(ctxT(t), "ar", l.ID); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("acquired:alice:%d released:alice:%d", l.Token, l.Token)
	if got := kinds(t, r, "ar"); got != want {
		t.Fatalf("after Release: %s, want %s", got, want)
	}
	evs, _ := r.History(ctxT(t), "ar", 0)
	if evs[1].HeldFor < 20*time.Millisecond || evs[1].HeldFor > time.Minute {
		t.Errorf("released: held for %v, want at least the 20ms slept", evs[1].HeldFor)
	}
	if evs[0].Wait < 0 || evs[0].Wait > time.Minute {
		t.Errorf("acquired: wait %v", evs[0].Wait)
	}
	if history.PendingOf(r) != 0 {
		t.Errorf("%d events pending", history.PendingOf(r))
	}
}

func testWaitTime(t *testing.T, b backend) {
	r := b.open(t)
	first := acquire(t, r, "wt", "first", 30*time.Second)
	waiting := make(chan struct{})
	got := make(chan *coord.Lease, 1)
	go func() {
		l, err := b.open(t).Acquire(ctxT(t), "wt", coord.AcquireOptions{TTL: 30 * time.Second, Holder: "second",
			Wait: coord.WaitForever, OnWait: func(coord.LockInfo) { close(waiting) }})
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	<-waiting
	// The second Acquire started before OnWait; the lock is free only after
	// this sleep: its wait is at least the sleep.
	time.Sleep(150 * time.Millisecond)
	if err := r.Release(ctxT(t), "wt", first.ID); err != nil {
		t.Fatal(err)
	}
	second := <-got
	if second == nil {
		t.FailNow()
	}
	want := fmt.Sprintf("acquired:first:%d released:first:%d acquired:second:%d", first.Token, first.Token, second.Token)
	if k := kinds(t, r, "wt"); k != want {
		t.Fatalf("history %s, want %s", k, want)
	}
	evs, _ := r.History(ctxT(t), "wt", 1)
	if evs[0].Wait < 150*time.Millisecond {
		t.Errorf("second waited %v by its record, less than the 150ms the lock stayed held", evs[0].Wait)
	}
}

func testRevoke(t *testing.T, b backend) {
	r := b.open(t)
	l := acquire(t, r, "rv", "victim", 30*time.Second)
	admin := b.open(t)
	info, err := admin.Revoke(ctxT(t), "rv")
	if err != nil || info.Token != l.Token {
		t.Fatalf("Revoke = %+v, %v", info, err)
	}
	if _, err := admin.Revoke(ctxT(t), "rv"); !errors.Is(err, coord.ErrNotHeld) {
		t.Fatalf("second Revoke = %v", err)
	}
	// The victim's own Release, later, finds its lease gone and its end on
	// record: nothing more.
	if err := r.Release(ctxT(t), "rv", l.ID); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("acquired:victim:%d revoked:victim:%d", l.Token, l.Token)
	if got := kinds(t, r, "rv"); got != want {
		t.Fatalf("history %s, want %s", got, want)
	}
}

func testTakeover(t *testing.T, b backend) {
	a := b.open(t)
	la := acquire(t, a, "to", "frozen", b.shortTTL)
	// No renewal, no release: a successor takes over once the lease expired.
	lb := acquire(t, b.open(t), "to", "successor", 30*time.Second)
	// The frozen holder wakes up and releases: its lease is gone, its
	// expiry is on record already.
	if err := a.Release(ctxT(t), "to", la.ID); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("acquired:frozen:%d expired:frozen:%d acquired:successor:%d", la.Token, la.Token, lb.Token)
	if got := kinds(t, a, "to"); got != want {
		t.Fatalf("history %s, want %s", got, want)
	}
}

func testExpiredAtRelease(t *testing.T, b backend) {
	a := b.open(t)
	la := acquire(t, a, "ex", "late", b.shortTTL)
	waitFree(t, a, "ex")
	if err := a.Release(ctxT(t), "ex", la.ID); err != nil {
		t.Fatal(err)
	}
	// The next holder does not record the expiry twice.
	lb := acquire(t, b.open(t), "ex", "next", 30*time.Second)
	want := fmt.Sprintf("acquired:late:%d expired:late:%d acquired:next:%d", la.Token, la.Token, lb.Token)
	if got := kinds(t, a, "ex"); got != want {
		t.Fatalf("history %s, want %s", got, want)
	}
}

// testExpiredWhenFree: a lease expired, and the lock is free when the next
// holder comes: it takes it at once (on etcd in the one transaction that
// also reads the history's head: AcquireLooking) and records the expiry
// before its acquisition.
func testExpiredWhenFree(t *testing.T, b backend) {
	a := b.open(t)
	la := acquire(t, a, "ef", "gone", b.shortTTL)
	waitFree(t, a, "ef")
	lb := acquire(t, b.open(t), "ef", "next", 30*time.Second)
	want := fmt.Sprintf("acquired:gone:%d expired:gone:%d acquired:next:%d", la.Token, la.Token, lb.Token)
	if got := kinds(t, a, "ef"); got != want {
		t.Fatalf("history %s, want %s", got, want)
	}
}

// testCrossProcess: `fence acquire` in one process, `fence release --lease`
// in another.
func testCrossProcess(t *testing.T, b backend) {
	l := acquire(t, b.open(t), "xp", "cron", 30*time.Second)
	time.Sleep(100 * time.Millisecond)
	other := b.open(t)
	if err := other.Release(ctxT(t), "xp", l.ID); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("acquired:cron:%d released:cron:%d", l.Token, l.Token)
	if got := kinds(t, other, "xp"); got != want {
		t.Fatalf("history %s, want %s", got, want)
	}
	evs, _ := other.History(ctxT(t), "xp", 1)
	if evs[0].HeldFor < 100*time.Millisecond || evs[0].HeldFor > time.Minute {
		t.Errorf("held for %v, want at least the 100ms slept", evs[0].HeldFor)
	}
}

// testLapsedCrossProcess: `fence acquire`, the TTL passes with nobody
// taking the lock, then `fence release --lease` in another process: the
// release records the expiry (it is what happened), once; a release naming
// another lease, or the lapsed one again, records nothing more.
func testLapsedCrossProcess(t *testing.T, b backend) {
	a := b.open(t)
	la := acquire(t, a, "lapse", "cron", b.shortTTL)
	lo := acquire(t, a, "lapse-other", "other", 30*time.Second)
	a.Close()
	waitFree(t, b.open(t), "lapse")
	other := b.open(t)
	if err := other.Release(ctxT(t), "lapse", lo.ID); !errors.Is(err, coord.ErrInvalid) {
		t.Fatalf("Release of another lock's lease = %v, want ErrInvalid", err)
	}
	if got, want := kinds(t, other, "lapse"), fmt.Sprintf("acquired:cron:%d", la.Token); got != want {
		t.Fatalf("history after releasing another lock's lease: %s, want %s", got, want)
	}
	for range 2 {
		if err := b.open(t).Release(ctxT(t), "lapse", la.ID); err != nil {
			t.Fatal(err)
		}
	}
	want := fmt.Sprintf("acquired:cron:%d expired:cron:%d", la.Token, la.Token)
	if got := kinds(t, other, "lapse"); got != want {
		t.Fatalf("history %s, want %s", got, want)
	}
	evs, _ := other.History(ctxT(t), "lapse", 0)
	if evs[0].LeaseID != la.ID || evs[1].LeaseID != la.ID {
		t.Errorf("lease ids on record: %q, %q; want %q", evs[0].LeaseID, evs[1].LeaseID, la.ID)
	}
	// The next holder does not record the expiry twice.
	lb := acquire(t, b.open(t), "lapse", "next", 30*time.Second)
	want += fmt.Sprintf(" acquired:next:%d", lb.Token)
	if got := kinds(t, other, "lapse"); got != want {
		t.Fatalf("history %s, want %s", got, want)
	}
}

func testRecordByOthers(t *testing.T, b backend) {
	r := b.open(t)
	l := acquire(t, r, "ro", "runner", 30*time.Second)
	for _, e := range []history.Event{
		{Lock: "ro", Kind: history.RenewalFailed, Holder: "runner", Token: l.Token, Count: 2, Error: "timeout"},
		{Lock: "ro", Kind: history.LeaseLost, Holder: "runner", Token: l.Token},
		{Lock: "ro", Kind: history.StaleRefused, Key: "k", Token: l.Token - 1, AcceptedToken: l.Token},
	} {
		if err := r.Record(ctxT(t), e); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Record(ctxT(t), history.Event{Lock: "ro", Kind: "nonsense"}); !errors.Is(err, coord.ErrInvalid) {
		t.Fatalf("Record(bad kind) = %v", err)
	}
	if history.PendingOf(r) != 0 {
		t.Fatalf("an invalid event was kept: %d pending", history.PendingOf(r))
	}
	want := fmt.Sprintf("acquired:runner:%d renewal_failed:runner:%d lease_lost:runner:%d stale_refused::%d",
		l.Token, l.Token, l.Token, l.Token-1)
	if got := kinds(t, r, "ro"); got != want {
		t.Fatalf("history %s, want %s", got, want)
	}
	heads, err := r.Heads(ctxT(t))
	if err != nil || len(heads) == 0 {
		t.Fatalf("Heads = %v, %v", heads, err)
	}
	ents, err := r.Since(ctxT(t), "ro", 2)
	if err != nil || len(ents) != 2 || ents[0].Event.Kind != history.LeaseLost {
		t.Fatalf("Since(2) = %+v, %v", ents, err)
	}
}

func testPassThrough(t *testing.T, b backend) {
	r := b.open(t)
	if r.Describe() != r.Unwrap().Describe() || r.Describe() == "" {
		t.Errorf("Describe = %q", r.Describe())
	}
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	ch, err := r.Watch(ctx, "pt")
	if err != nil {
		t.Fatal(err)
	}
	l := acquire(t, r, "pt", "w", 30*time.Second)
	for ev := range ch {
		if ev.Type == coord.EventAcquired && ev.Info.Token == l.Token {
			break
		}
	}
	info, err := r.Inspect(ctxT(t), "pt")
	if err != nil || info.Token != l.Token {
		t.Fatalf("Inspect = %+v, %v", info, err)
	}
	infos, err := r.List(ctxT(t), "pt")
	if err != nil || len(infos) != 1 {
		t.Fatalf("List = %+v, %v", infos, err)
	}
	if _, err := r.Renew(ctxT(t), "pt", l.ID); err != nil {
		t.Fatal(err)
	}
	// AttachProcess reaches the backend.
	a := r
	if b.attaches {
		pgid := syscall.Getpgrp()
		if err := a.AttachProcess(ctxT(t), "pt", l.ID, coord.ProcessInfo{PIDs: []int{os.Getpid()}, PGID: pgid}); err != nil {
			t.Fatalf("AttachProcess = %v", err)
		}
		if info, _ = r.Inspect(ctxT(t), "pt"); info.Process == nil || info.Process.PGID != pgid {
			t.Errorf("AttachProcess did not reach the backend: %+v", info.Process)
		}
	}
	if err := r.Release(ctxT(t), "pt", l.ID); err != nil {
		t.Fatal(err)
	}
}

// stoppableStore is an etcd history store on a server of its own, which the
// test stops and restarts: the coordinator (local) stays reachable while the
// history cannot be written.
func stoppableStore(t *testing.T) (*etcdtest.Server, history.Store) {
	srv := etcdtest.Start(t)
	s, err := etcdstore.New(srv.Client(t), "/h/")
	if err != nil {
		t.Fatal(err)
	}
	return srv, s
}

// TestRecorderStoreDown: when the history cannot be written, lease
// operations go on, the failure is logged, and the events are written, in

// TestWrapKeepsValidOptions: an option with a negative value falls back to
// its default (with a warning) and the other options are kept: the clock
// and the logger given beside it are the Recorder's.
func TestWrapKeepsValidOptions(t *testing.T) {
	dir := t.TempDir()
	c, err := local.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	s, err := localstore.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	var logged strings.Builder
	logger := slog.New(slog.NewTextHandler(&logged, nil))
	r := history.Wrap(c, s, history.WithMaxPending(-1), history.WithClock(func() time.Time { return at }), history.WithLogger(logger))
	defer r.Close()
	l := acquire(t, r, "opts", "w", time.Minute)
	if err := r.Release(ctxT(t), "opts", l.ID); err != nil {
		t.Fatal(err)
	}
	evs, err := r.History(ctxT(t), "opts", 0)
	if err != nil || len(evs) != 2 {
		t.Fatalf("History = %+v, %v", evs, err)
	}
	for _, ev := range evs {
		if !ev.Time.Equal(at) {
			t.Errorf("%s recorded at %v, want the given clock's %v", ev.Kind, ev.Time, at)
		}
	}
	if !strings.Contains(logged.String(), "max pending -1 is negative") {
		t.Errorf("the given logger did not get the warning; it got %q", logged.String())
	}
	if err := history.NewOptions(history.WithMaxPending(-1)); !errors.Is(err, coord.ErrInvalid) {
		t.Errorf("NewOptions(negative) = %v, want ErrInvalid", err)
	}
}

// order, once a later write succeeds.
func TestRecorderStoreDown(t *testing.T) {
	srv, store := stoppableStore(t)
	c, err := local.Open(filepath.Join(t.TempDir(), "state"))
	if err != nil {
		t.Fatal(err)
	}
	var logs syncbuf.Buffer
	r := history.Wrap(c, store, history.WithRecordTimeout(300*time.Millisecond),
		history.WithLogger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))))
	defer r.Close()

	srv.Stop()
	l, err := r.Acquire(ctxT(t), "down", coord.AcquireOptions{TTL: 30 * time.Second, Holder: "h"})
	if err != nil {
		t.Fatalf("Acquire with the history down: %v", err)
	}
	if err := r.Release(ctxT(t), "down", l.ID); err != nil {
		t.Fatalf("Release with the history down: %v", err)
	}
	rf := history.Event{Lock: "down", Kind: history.RenewalFailed, Holder: "h", Token: l.Token, Count: 1}
	ctx, cancel := context.WithTimeout(ctxT(t), 300*time.Millisecond)
	err = r.Record(ctx, rf)
	cancel()
	if err == nil {
		t.Fatal("Record with the history down succeeded")
	}
	if history.PendingOf(r) != 3 {
		t.Fatalf("%d events pending, want 3", history.PendingOf(r))
	}
	if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), "could not record") {
		t.Errorf("no warning logged:\n%s", logs.String())
	}

	srv.Restart(t)
	rf.Count = 2
	if err := r.Record(ctxT(t), rf); err != nil {
		t.Fatalf("Record after the restart: %v", err)
	}
	want := fmt.Sprintf("acquired:h:%d released:h:%d renewal_failed:h:%d renewal_failed:h:%d", l.Token, l.Token, l.Token, l.Token)
	if got := kinds(t, store, "down"); got != want {
		t.Fatalf("history %s, want %s", got, want)
	}
	if history.PendingOf(r) != 0 {
		t.Fatalf("%d events still pending", history.PendingOf(r))
	}
}

func TestPending(t *testing.T) {
	srv, store := stoppableStore(t)
	p := history.NewPending(store, 3)
	ev := func(i int) history.Event {
		return history.Event{Lock: "p", Kind: history.RenewalFailed, Token: uint64(i), Count: i}
	}
	if err := p.Record(ctxT(t), ev(1)); err != nil {
		t.Fatal(err)
	}
	if err := p.Record(ctxT(t), history.Event{Lock: "", Kind: history.Acquired}); !errors.Is(err, coord.ErrInvalid) {
		t.Fatalf("invalid event: %v", err)
	}
	srv.Stop()
	for i := 2; i <= 6; i++ {
		ctx, cancel := context.WithTimeout(ctxT(t), 200*time.Millisecond)
		err := p.Record(ctx, ev(i))
		cancel()
		if err == nil {
			t.Fatalf("Record(%d) with the store down succeeded", i)
		}
	}
	// Which two were dropped (2 and 3) is checked once they are written.
	if p.Len() != 3 {
		t.Fatalf("Len %d, want 3 (2 dropped)", p.Len())
	}
	srv.Restart(t)
	if err := p.Flush(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if err := p.Append(ctxT(t), []history.Event{ev(7)}); err != nil {
		t.Fatal(err)
	}
	evs, err := store.History(ctxT(t), "p", 0)
	if err != nil {
		t.Fatal(err)
	}
	var got []uint64
	for _, e := range evs {
		got = append(got, e.Token)
	}
	if fmt.Sprint(got) != "[1 4 5 6 7]" {
		t.Fatalf("tokens written %v, want [1 4 5 6 7] (2 and 3 dropped)", got)
	}
	if p.Len() != 0 {
		t.Fatalf("Len %d after the flush", p.Len())
	}
}

// TestPendingKeepsOrderUnderConcurrency: many goroutines record through one
// Pending; each one's events come out in its order.
func TestPendingKeepsOrderUnderConcurrency(t *testing.T) {
	s, err := localstore.Open(filepath.Join(t.TempDir(), "state"))
	if err != nil {
		t.Fatal(err)
	}
	p := history.NewPending(s, 0)
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 1; i <= 25; i++ {
				if err := p.Record(context.Background(), history.Event{Lock: "q", Kind: history.RenewalFailed,
					Holder: fmt.Sprint(w), Count: i}); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	evs, err := s.History(ctxT(t), "q", 0)
	if err != nil || len(evs) != 100 {
		t.Fatalf("%d events, %v", len(evs), err)
	}
	next := map[string]int{}
	for _, e := range evs {
		next[e.Holder]++
		if e.Count != next[e.Holder] {
			t.Fatalf("writer %s: event %d has count %d", e.Holder, next[e.Holder], e.Count)
		}
	}
}
