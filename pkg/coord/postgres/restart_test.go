package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/coord/postgres"
	"github.com/fence-dev/fence/pkg/guard/sqlguard/pgtest"
)

// TestWaiterSurvivesRestart: a waiter whose connection breaks when the
// server restarts keeps waiting, queues again, and gets the lock within
// about a second of its release.
func TestWaiterSurvivesRestart(t *testing.T) {
	srv := pgtest.Start(t)
	url := srv.URL(srv.CreateDatabase(t))
	ctx := context.Background()
	holder, waiter := mustOpen(t, url), mustOpen(t, url)
	l, err := holder.Acquire(ctx, "rs", coord.AcquireOptions{TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	queued := make(chan struct{})
	type result struct {
		l   *coord.Lease
		err error
		at  time.Time
	}
	got := make(chan result, 1)
	go func() {
		l, err := waiter.Acquire(ctx, "rs", coord.AcquireOptions{TTL: time.Second, Wait: 30 * time.Second, OnWait: func(coord.LockInfo) { close(queued) }})
		got <- result{l, err, time.Now()}
	}()
	<-queued
	srv.RestartAfter(t, time.Second)
	time.Sleep(500 * time.Millisecond)
	select {
	case r := <-got:
		t.Fatalf("the waiter returned across the restart: %v, %v", r.l, r.err)
	default:
	}
	released := retry(t, func() error { return holder.Release(ctx, "rs", l.ID) })
	r := <-got
	if r.err != nil {
		t.Fatalf("waiter after the restart and release: %v", r.err)
	}
	if d := r.at.Sub(released); d > 1500*time.Millisecond {
		t.Errorf("the waiter got the lock %v after its release; want about a second at most", d)
	}
	if r.l.Token != l.Token+1 {
		t.Errorf("token %d after %d", r.l.Token, l.Token)
	}
}

// tallyRenewal counts one renewal of TestHolderAcrossRestart's holder: an
// acknowledgement after the contender got the lock, a new safe-until, or
// the loss told.
func tallyRenewal(r coord.Renewal, err error, contenderAt time.Time, acksAfter int, safe time.Time, lostSeen bool) (int, time.Time, bool) {
	switch {
	case err == nil && !contenderAt.IsZero():
		acksAfter++
	case err == nil:
		safe = r.Sent.Add(r.TTL)
	case errors.Is(err, coord.ErrLeaseLost):
		lostSeen = true
	}
	return acksAfter, safe, lostSeen
}

// TestHolderAcrossRestart: a holder renewing through a server restart
// either keeps its lease (a renewal acknowledged within its safe time) or
// loses it and is told so; a contender never gets the lock before the
// holder's last acknowledged safe-until, and no renewal is acknowledged
// after the contender got it. With a TTL shorter than the restart the
// holder's safe-until passes during it (its supervisor stops the command);
// a renewal that reaches the lease before a contender has taken it over
// starts a new safe time (the contender counts again), which is safe.
func TestHolderAcrossRestart(t *testing.T) {
	srv := pgtest.Start(t)
	url := srv.URL(srv.CreateDatabase(t))
	for _, ttl := range []time.Duration{300 * time.Millisecond, 3 * time.Second} {
		t.Run(ttl.String(), func(t *testing.T) {
			ctx := context.Background()
			holder, contender := mustOpen(t, url), mustOpen(t, url)
			name := "hr" + ttl.String()
			l, err := retryV(t, func() (*coord.Lease, error) { return holder.Acquire(ctx, name, coord.AcquireOptions{TTL: ttl}) })
			if err != nil {
				t.Fatal(err)
			}
			var mu sync.Mutex
			safe := l.Sent.Add(l.TTL)
			var contenderAt time.Time
			var unsafeSeen, lostSeen bool
			var acksAfter int
			stop := make(chan struct{})
			done := make(chan struct{})
			go func() { // the holder renews every TTL/4, as fence does
				defer close(done)
				for {
					select {
					case <-stop:
						return
					case <-time.After(ttl / 4):
					}
					r, err := holder.Renew(ctx, name, l.ID)
					mu.Lock()
					unsafeSeen = unsafeSeen || time.Now().After(safe)
					acksAfter, safe, lostSeen = tallyRenewal(r, err, contenderAt, acksAfter, safe, lostSeen)
					mu.Unlock()
					if errors.Is(err, coord.ErrLeaseLost) {
						return
					}
				}
			}()
			cres := make(chan error, 1)
			go func() {
				_, err := contender.Acquire(ctx, name, coord.AcquireOptions{TTL: ttl, Wait: 20 * time.Second})
				mu.Lock()
				contenderAt = time.Now()
				if contenderAt.Before(safe) {
					err = errors.Join(err, errors.New("the contender got the lock before the holder's safe-until"))
				}
				mu.Unlock()
				cres <- err
			}()
			time.Sleep(ttl)
			srv.RestartAfter(t, time.Second) // longer than the short TTL, shorter than the long one
			time.Sleep(2 * ttl)
			mu.Lock()
			kept := contenderAt.IsZero() && !lostSeen
			mu.Unlock()
			if long := ttl > time.Second; long && !kept {
				t.Errorf("the lease was lost with a TTL of %v across a 1s restart", ttl)
			}
			if kept {
				// Kept: the contender waits until the holder stops.
				close(stop)
				<-done
				if err := <-cres; err != nil {
					t.Fatal(err)
				}
			} else {
				if err := <-cres; err != nil {
					t.Fatal(err)
				}
				time.Sleep(ttl) // the holder tries again and learns
				close(stop)
				<-done
			}
			mu.Lock()
			defer mu.Unlock()
			if acksAfter > 0 {
				t.Errorf("%d renewals acknowledged after the contender got the lock", acksAfter)
			}
			if !kept && !lostSeen {
				t.Errorf("the holder lost the lock without being told (ErrLeaseLost)")
			}
			if (!kept || ttl < time.Second) != unsafeSeen {
				t.Errorf("the holder saw its safe-until pass: %v; want %v", unsafeSeen, !unsafeSeen)
			}
			t.Logf("TTL %v: kept %v, holder saw its safe-until pass %v, told lost %v", ttl, kept, unsafeSeen, lostSeen)
		})
	}
}

func mustOpen(t *testing.T, url string) coord.Coordinator {
	t.Helper()
	c, err := open(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// retry calls f until it succeeds (for 20 s) and returns when it did.
func retry(t *testing.T, f func() error) time.Time {
	t.Helper()
	_, err := retryV(t, func() (struct{}, error) { return struct{}{}, f() })
	if err != nil {
		t.Fatal(err)
	}
	return time.Now()
}

func retryV[T any](t *testing.T, f func() (T, error)) (T, error) {
	t.Helper()
	end := time.Now().Add(20 * time.Second)
	for {
		v, err := f()
		if err == nil || !errors.Is(err, coord.ErrUnavailable) || time.Now().After(end) {
			return v, err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestListOneQuery: List of many locks, with holders, a waiter and a limit,
// is one query.
func TestListOneQuery(t *testing.T) {
	srv := pgtest.Start(t)
	url := srv.URL(srv.CreateDatabase(t))
	ctx := context.Background()
	var k counter
	c, err := postgres.Open(ctx, url, postgres.WithTracer(&k))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, n := range []string{"l/a", "l/b", "l/c", "l/d", "other"} {
		if _, err := c.Acquire(ctx, n, coord.AcquireOptions{TTL: 10 * time.Second}); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.SetLimit(ctx, coord.Limit{Name: "l/e", Max: 0, Reason: "frozen", By: "me"}); err != nil {
		t.Fatal(err)
	}
	queued := make(chan struct{})
	go func() {
		_, _ = mustOpen(t, url).Acquire(ctx, "l/a", coord.AcquireOptions{Wait: coord.WaitForever, OnWait: func(coord.LockInfo) { close(queued) }})
	}()
	<-queued
	before := k.n.Load()
	infos, err := c.List(ctx, "l/")
	if err != nil {
		t.Fatal(err)
	}
	if n := k.n.Load() - before; n != 1 {
		t.Errorf("List sent %d queries, want 1", n)
	}
	var got []string
	for _, i := range infos {
		got = append(got, fmt.Sprintf("%s:%v:%d:%v", i.Name, i.Held, i.Waiters, i.Limit != nil && i.Limit.Reason == "frozen" && i.Limit.By == "me"))
	}
	if want := "[l/a:true:1:false l/b:true:0:false l/c:true:0:false l/d:true:0:false l/e:false:0:true]"; fmt.Sprint(got) != want {
		t.Errorf("List = %v, want %v", got, want)
	}
}

// next reads the next event of ch within 10 s.
func next(t *testing.T, ch <-chan coord.Event) coord.Event {
	t.Helper()
	select {
	case ev, ok := <-ch:
		if !ok {
			t.Fatal("the watch ended")
		}
		return ev
	case <-time.After(10 * time.Second):
		t.Fatal("no event within 10s")
	}
	return coord.Event{}
}

// TestWatchMissedLease: a lease granted and released while the watch was
// busy (its consumer not reading) is still sent as acquired, then released.
func TestWatchMissedLease(t *testing.T) {
	srv := pgtest.Start(t)
	url := srv.URL(srv.CreateDatabase(t))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c, w := mustOpen(t, url), mustOpen(t, url)
	ch, err := w.Watch(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		l, err := c.Acquire(ctx, "m", coord.AcquireOptions{Holder: fmt.Sprint("h", i)})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Release(ctx, "m", l.ID); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	for len(got) < 4 {
		ev := next(t, ch)
		got = append(got, fmt.Sprintf("%s:%d:%s", ev.Type, ev.Info.Token, ev.Info.Holder))
	}
	if want := "[acquired:1:h0 released:0: acquired:2:h1 released:0:]"; fmt.Sprint(got) != want {
		t.Errorf("events %v, want %v", got, want)
	}
}

// TestWatchAcrossRestart: a watch whose connection breaks connects again,
// sends EventReset and goes on.
func TestWatchAcrossRestart(t *testing.T) {
	srv := pgtest.Start(t)
	url := srv.URL(srv.CreateDatabase(t))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c, w := mustOpen(t, url), mustOpen(t, url)
	ch, err := w.Watch(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	srv.RestartAfter(t, time.Second)
	if ev := next(t, ch); ev.Type != coord.EventReset {
		t.Fatalf("first event after the restart: %+v, want reset", ev)
	}
	if _, err := retryV(t, func() (*coord.Lease, error) { return c.Acquire(ctx, "after", coord.AcquireOptions{}) }); err != nil {
		t.Fatal(err)
	}
	if ev := next(t, ch); ev.Type != coord.EventAcquired || ev.Info.Name != "after" {
		t.Fatalf("event after the restart: %+v, want acquired", ev)
	}
}

// TestTokensAcrossCrash: the server crashes (SIGQUIT to the postmaster: an
// immediate shutdown, its WAL buffers lost, crash recovery at the next
// start) right after a grant, several times; every token granted before a
// crash stays granted, so the next one is above it. pgtest's server runs
// with synchronous_commit off, as a server tuned for speed may: fence's
// own commits must still be durable.
func TestTokensAcrossCrash(t *testing.T) {
	srv := pgtest.Start(t)
	url := srv.URL(srv.CreateDatabase(t))
	ctx := context.Background()
	var last uint64
	for i := range 5 {
		c, err := retryV(t, func() (coord.Coordinator, error) { return open(url) })
		if err != nil {
			t.Fatal(err)
		}
		for j := range 3 {
			l, err := retryV(t, func() (*coord.Lease, error) {
				return c.Acquire(ctx, "crash", coord.AcquireOptions{TTL: time.Second, Wait: 20 * time.Second})
			})
			if err != nil {
				t.Fatal(err)
			}
			if l.Token <= last {
				t.Fatalf("crash %d: token %d after token %d was granted", i, l.Token, last)
			}
			last = l.Token
			if j < 2 { // the last grant is the last commit before the crash
				if err := c.Release(ctx, "crash", l.ID); err != nil {
					t.Fatal(err)
				}
			}
		}
		if err := syscall.Kill(srv.PID(), syscall.SIGQUIT); err != nil {
			t.Fatal(err)
		}
		c.Close()
		srv.Restart(t)
	}
}

// TestRenewalAcrossCrash: a renewal acknowledged just before the server
// crashes still counts after crash recovery: a contender that saw the
// lease before the renewal does not take it over before the renewal's
// send time + TTL (the holder's safe-until).
func TestRenewalAcrossCrash(t *testing.T) {
	srv := pgtest.Start(t)
	url := srv.URL(srv.CreateDatabase(t))
	ctx := context.Background()
	holder, contender := mustOpen(t, url), mustOpen(t, url)
	const ttl = 3 * time.Second
	l, err := holder.Acquire(ctx, "rc", coord.AcquireOptions{TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second) // the grant is on disk whatever the settings
	if _, err := contender.Acquire(ctx, "rc", coord.AcquireOptions{TTL: ttl}); !errors.Is(err, coord.ErrBusy) {
		t.Fatalf("contender: %v, want busy", err) // it has seen the lease now
	}
	time.Sleep(time.Second)
	r, err := holder.Renew(ctx, "rc", l.ID)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(srv.PID(), syscall.SIGQUIT); err != nil {
		t.Fatal(err)
	}
	srv.Restart(t)
	if _, err := retryV(t, func() (*coord.Lease, error) {
		return contender.Acquire(ctx, "rc", coord.AcquireOptions{TTL: ttl, Wait: 20 * time.Second})
	}); err != nil {
		t.Fatal(err)
	}
	if safe := r.Sent.Add(r.TTL); time.Now().Before(safe) {
		t.Errorf("the contender took the lease %v before the acknowledged renewal's send time + TTL", time.Until(safe))
	}
}
