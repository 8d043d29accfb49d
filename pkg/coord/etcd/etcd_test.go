package etcd_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fence-dev/fence/internal/etcdtest"
	"github.com/fence-dev/fence/internal/faultproxy"
	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/coord/etcd"
)

// guard turns a hang into a failure; no test relies on it for timing.
const guard = 30 * time.Second

func ctx(t testing.TB) context.Context {
	c, cancel := context.WithTimeout(context.Background(), guard)
	t.Cleanup(cancel)
	return c
}

var prefixes atomic.Int64

// open opens a coordinator on srv under prefix, closed at cleanup.
func open(t testing.TB, srv *etcdtest.Server, prefix string) *etcd.Coordinator {
	t.Helper()
	c, err := etcd.Dial(ctx(t), srv.Endpoints(), etcd.WithPrefix(prefix), etcd.WithDialTimeout(5*time.Second))
	if err != nil {
		t.Fatalf("etcd.New: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// openProxied opens a coordinator on srv through n fault proxies (its
// endpoints, in order), all closed at cleanup.
func openProxied(t testing.TB, srv *etcdtest.Server, n int) (*etcd.Coordinator, []*faultproxy.Proxy) {
	t.Helper()
	target := strings.TrimPrefix(srv.Endpoints()[0], "http://")
	var pxs []*faultproxy.Proxy
	var eps []string
	for range n {
		px, err := faultproxy.New(target)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { px.Close() })
		pxs = append(pxs, px)
		eps = append(eps, "http://"+px.Addr())
	}
	c, err := etcd.Dial(ctx(t), eps, etcd.WithDialTimeout(5*time.Second))
	if err != nil {
		t.Fatalf("etcd.New: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c, pxs
}

func acquire(t testing.TB, c coord.Coordinator, name string, opts coord.AcquireOptions) *coord.Lease {
	t.Helper()
	if opts.TTL == 0 {
		opts.TTL = guard
	}
	l, err := c.Acquire(ctx(t), name, opts)
	if err != nil {
		t.Fatalf("Acquire(%q): %v", name, err)
	}
	return l
}

func release(t testing.TB, c coord.Coordinator, l *coord.Lease) {
	t.Helper()
	if err := c.Release(ctx(t), l.Name, l.ID); err != nil {
		t.Fatalf("Release(%q): %v", l.Name, err)
	}
}

// keys returns every key under prefix with its create revision.
func keys(t testing.TB, cli *clientv3.Client, prefix string) map[string]int64 {
	t.Helper()
	resp, err := cli.Get(ctx(t), prefix, clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]int64{}
	for _, kv := range resp.Kvs {
		m[string(kv.Key)] = kv.CreateRevision
	}
	return m
}

// TestBackend runs the cases that share one server, each under its own
// prefix.
func TestBackend(t *testing.T) {
	srv := etcdtest.Start(t)
	for _, tc := range []struct {
		name string
		run  func(*testing.T, *etcdtest.Server, string)
	}{
		{"MutualExclusion", testMutualExclusion},
		{"FIFO", testFIFO},
		{"KeyLayout", testKeyLayout},
		{"PrefixWithoutSlash", testPrefixWithoutSlash},
		{"NamesIndependent", testNamesIndependent},
		{"TimeoutAndCancelLeaveNoKeys", testTimeoutAndCancelLeaveNoKeys},
		{"RenewKeepsLease", testRenewKeepsLease},
		{"Expiry", testExpiry},
		{"Revoke", testRevoke},
		{"Watch", testWatch},
		{"BadInput", testBadInput},
		{"Close", testClose},
		{"WaiterLeaseRevoked", testWaiterLeaseRevoked},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.run(t, srv, fmt.Sprintf("/t%d/", prefixes.Add(1)))
		})
	}
}

// testMutualExclusion: 24 goroutines, each with its own client, never hold
// the lock together, and tokens increase in the order they held it.
func testMutualExclusion(t *testing.T, srv *etcdtest.Server, prefix string) {
	const workers, rounds = 24, 3
	var (
		inside atomic.Int32
		mu     sync.Mutex
		order  []uint64
	)
	cs := make([]*etcd.Coordinator, workers)
	for i := range cs {
		cs[i] = open(t, srv, prefix)
	}
	errs := make(chan error, workers)
	for i, c := range cs {
		go func() {
			for r := 0; r < rounds; r++ {
				l, err := c.Acquire(ctx(t), "mutex", coord.AcquireOptions{TTL: guard, Holder: fmt.Sprint("w", i), Wait: coord.WaitForever})
				if err != nil {
					errs <- err
					return
				}
				if n := inside.Add(1); n != 1 {
					errs <- fmt.Errorf("%d holders at once", n)
					return
				}
				mu.Lock()
				order = append(order, l.Token)
				mu.Unlock()
				time.Sleep(time.Millisecond)
				inside.Add(-1)
				if err := c.Release(ctx(t), l.Name, l.ID); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range cs {
		select {
		case err := <-errs:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(guard):
			t.Fatal("contenders still running")
		}
	}
	if len(order) != workers*rounds {
		t.Fatalf("%d grants, want %d", len(order), workers*rounds)
	}
	for i := 1; i < len(order); i++ {
		if order[i] <= order[i-1] {
			t.Fatalf("tokens in holding order not increasing: %v", order)
		}
	}
}

// testFIFO: waiters are served in the order they queued, each waking only
// when the one ahead releases.
func testFIFO(t *testing.T, srv *etcdtest.Server, prefix string) {
	c0 := open(t, srv, prefix)
	holder := acquire(t, c0, "fifo", coord.AcquireOptions{Holder: "holder"})
	const n = 8
	got := make(chan int, n)
	done := make(chan struct{}, n)
	defer func() {
		for i := 0; i < n; i++ {
			select {
			case <-done:
			case <-time.After(guard):
				t.Error("waiters still running")
				return
			}
		}
	}()
	for i := 0; i < n; i++ {
		c := open(t, srv, prefix)
		queued := make(chan struct{})
		go func() {
			l, err := c.Acquire(ctx(t), "fifo", coord.AcquireOptions{TTL: guard, Holder: fmt.Sprint("w", i), Wait: coord.WaitForever,
				OnWait: func(cur coord.LockInfo) {
					if cur.Token != holder.Token || cur.Holder != "holder" || cur.Waiters != i+1 {
						t.Errorf("waiter %d: OnWait saw holder %q token %d with %d waiters", i, cur.Holder, cur.Token, cur.Waiters)
					}
					close(queued)
				}})
			if err != nil {
				t.Error(err)
				got <- -1
				done <- struct{}{}
				return
			}
			// Report before releasing: the next waiter cannot hold (and
			// report) until this one has released.
			got <- i
			if err := c.Release(ctx(t), l.Name, l.ID); err != nil {
				t.Error(err)
			}
			done <- struct{}{}
		}()
		select {
		case <-queued:
		case <-time.After(guard):
			t.Fatalf("waiter %d never queued", i)
		}
	}
	if info, err := c0.Inspect(ctx(t), "fifo"); err != nil || info.Waiters != n {
		t.Errorf("Inspect: %d waiters, %v; want %d", info.Waiters, err, n)
	}
	release(t, c0, holder)
	for want := 0; want < n; want++ {
		select {
		case i := <-got:
			if i != want {
				t.Fatalf("waiter %d served when %d was due", i, want)
			}
		case <-time.After(guard):
			t.Fatalf("waiter %d not served", want)
		}
	}
}

// testKeyLayout: the key is <prefix>locks/<escaped name>/<lease id>, its
// create revision is the token, and its lease is the lease.
func testKeyLayout(t *testing.T, srv *etcdtest.Server, prefix string) {
	c := open(t, srv, prefix)
	cli := srv.Client(t)
	for name, esc := range map[string]string{"a/b c": "a%2Fb%20c", "100%": "100%25", "é": "%C3%A9"} {
		l := acquire(t, c, name, coord.AcquireOptions{Holder: "me"})
		key := prefix + "locks/" + esc + "/" + l.ID
		resp, err := cli.Get(ctx(t), key)
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Kvs) != 1 {
			t.Fatalf("no key %q; keys: %v", key, keys(t, cli, prefix))
		}
		kv := resp.Kvs[0]
		if uint64(kv.CreateRevision) != l.Token {
			t.Errorf("token %d, key created at revision %d", l.Token, kv.CreateRevision)
		}
		if fmt.Sprintf("%x", kv.Lease) != l.ID {
			t.Errorf("key's lease %x, lease id %s", kv.Lease, l.ID)
		}
		if !strings.Contains(string(kv.Value), `"holder":"me"`) || !strings.Contains(string(kv.Value), `"acquired_at"`) {
			t.Errorf("value %s", kv.Value)
		}
		release(t, c, l)
	}
	if k := keys(t, cli, prefix); len(k) != 0 {
		t.Errorf("keys left after release: %v", k)
	}
	if got := c.Prefix(); got != prefix {
		t.Errorf("Prefix() = %q", got)
	}
	if d := c.Describe(); d != "etcd "+strings.TrimPrefix(srv.Endpoints()[0], "http://") {
		t.Errorf("Describe() = %q", d)
	}
}

// testPrefixWithoutSlash: a prefix not ending in "/" is the one that does
// ("/p" is "/p/"): coordinators given either spelling share one namespace,
// so a lock held through one is busy through the other, and no key lands
// at "/plocks/...".
func testPrefixWithoutSlash(t *testing.T, srv *etcdtest.Server, prefix string) {
	bare := strings.TrimSuffix(prefix, "/")
	a, b := open(t, srv, bare), open(t, srv, prefix)
	if a.Prefix() != prefix {
		t.Fatalf("Prefix() of %q = %q, want %q", bare, a.Prefix(), prefix)
	}
	l := acquire(t, a, "shared", coord.AcquireOptions{Holder: "a"})
	if _, err := b.Acquire(ctx(t), "shared", coord.AcquireOptions{TTL: guard, Holder: "b"}); !errors.Is(err, coord.ErrBusy) {
		t.Fatalf("the lock held under %q, acquired under %q: %v (want busy: one namespace)", bare, prefix, err)
	}
	if info, err := b.Inspect(ctx(t), "shared"); err != nil || !info.Held || info.Token != l.Token {
		t.Fatalf("Inspect under %q: %+v, %v", prefix, info, err)
	}
	cli := srv.Client(t)
	if k := keys(t, cli, bare+"locks/"); len(k) != 0 {
		t.Fatalf("keys beside the prefix: %v", k)
	}
	release(t, a, l)
	if etcd.NormalPrefix("") != "/fence/" || etcd.NormalPrefix("x") != "x/" || etcd.NormalPrefix("/") != "/" {
		t.Fatal("NormalPrefix")
	}
}

// testNamesIndependent: no name waits behind another that extends it or
// that an escape could confuse with it.
func testNamesIndependent(t *testing.T, srv *etcdtest.Server, prefix string) {
	c := open(t, srv, prefix)
	names := []string{"a/b", "a", "a/", "ab", "a%2Fb", "a%", "a b", "a/b/c", "ä", "a%25", "✓/x"}
	for _, n := range names {
		l, err := c.Acquire(ctx(t), n, coord.AcquireOptions{TTL: guard, Wait: 0})
		if err != nil {
			t.Fatalf("Acquire(%q) with the others held: %v", n, err)
		}
		defer release(t, c, l)
	}
	infos, err := c.List(ctx(t), "a")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, i := range infos {
		got = append(got, i.Name)
	}
	if want := "[a a b a% a%25 a%2Fb a/ a/b a/b/c ab]"; fmt.Sprint(got) != want {
		t.Errorf("List(a) = %v, want %s", got, want)
	}
}

// TestNoWaitLeavesNothing: a no-wait attempt on a held lock writes nothing
// and revokes its lease. (Its own server: it counts every lease.)
func TestNoWaitLeavesNothing(t *testing.T) {
	t.Parallel()
	srv, prefix := etcdtest.Start(t), "/nw/"
	c1, c2 := open(t, srv, prefix), open(t, srv, prefix)
	cli := srv.Client(t)
	l := acquire(t, c1, "nw", coord.AcquireOptions{Holder: "holder"})
	before := keys(t, cli, prefix)
	leases, err := cli.Leases(ctx(t))
	if err != nil || len(leases.Leases) != 1 {
		t.Fatalf("leases: %v, %v", leases, err)
	}
	_, err = c2.Acquire(ctx(t), "nw", coord.AcquireOptions{TTL: guard, Wait: 0})
	if !errors.Is(err, coord.ErrBusy) || !strings.Contains(err.Error(), `held by holder (token`) {
		t.Fatalf("Acquire(no wait) = %v, want ErrBusy naming the holder", err)
	}
	if after := keys(t, cli, prefix); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("keys %v after a failed no-wait attempt, were %v", after, before)
	}
	if after, _ := cli.Leases(ctx(t)); len(after.Leases) != len(leases.Leases) {
		t.Errorf("%d leases after a failed no-wait attempt, were %d", len(after.Leases), len(leases.Leases))
	}
	release(t, c1, l)
}

// testTimeoutAndCancelLeaveNoKeys: a waiter that times out or is cancelled
// takes its key out of the queue.
func testTimeoutAndCancelLeaveNoKeys(t *testing.T, srv *etcdtest.Server, prefix string) {
	c1, c2 := open(t, srv, prefix), open(t, srv, prefix)
	cli := srv.Client(t)
	l := acquire(t, c1, "to", coord.AcquireOptions{Holder: "holder"})
	_, err := c2.Acquire(ctx(t), "to", coord.AcquireOptions{TTL: guard, Wait: 200 * time.Millisecond})
	if !errors.Is(err, coord.ErrBusy) {
		t.Fatalf("Acquire(wait 200ms) = %v, want ErrBusy", err)
	}
	if k := keys(t, cli, prefix); len(k) != 1 {
		t.Errorf("keys after a timed-out wait: %v", k)
	}
	cctx, cancel := context.WithCancel(ctx(t))
	res := make(chan error, 1)
	go func() {
		_, err := c2.Acquire(cctx, "to", coord.AcquireOptions{TTL: guard, Wait: coord.WaitForever, OnWait: func(coord.LockInfo) { cancel() }})
		res <- err
	}()
	select {
	case err := <-res:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled Acquire = %v", err)
		}
	case <-time.After(guard):
		t.Fatal("cancelled Acquire did not return")
	}
	if k := keys(t, cli, prefix); len(k) != 1 {
		t.Errorf("keys after a cancelled wait: %v", k)
	}
	release(t, c1, l)
	if k := keys(t, cli, prefix); len(k) != 0 {
		t.Errorf("keys after release: %v", k)
	}
}

// testRenewKeepsLease: a 2s lease renewed every half second outlives two
// TTLs while a waiter waits; once renewals stop it expires.
func testRenewKeepsLease(t *testing.T, srv *etcdtest.Server, prefix string) {
	c1, c2 := open(t, srv, prefix), open(t, srv, prefix)
	l := acquire(t, c1, "renew", coord.AcquireOptions{TTL: 2 * time.Second, Holder: "renewer"})
	if l.TTL != 2*time.Second {
		t.Fatalf("granted TTL %v, want 2s", l.TTL)
	}
	waiter := make(chan *coord.Lease, 1)
	go func() {
		w, err := c2.Acquire(ctx(t), "renew", coord.AcquireOptions{TTL: guard, Holder: "waiter", Wait: coord.WaitForever})
		if err != nil {
			t.Error(err)
		}
		waiter <- w
	}()
	end := time.Now().Add(2*l.TTL + l.TTL/2)
	for time.Now().Before(end) {
		time.Sleep(l.TTL / 4)
		before := time.Now()
		r, err := c1.Renew(ctx(t), "renew", l.ID)
		if err != nil {
			t.Fatalf("Renew: %v", err)
		}
		if r.Sent.Before(before) || r.TTL != 2*time.Second {
			t.Errorf("Renewal %+v", r)
		}
		select {
		case w := <-waiter:
			t.Fatalf("waiter holds (%v) while the lease is renewed", w)
		default:
		}
	}
	info, err := c2.Inspect(ctx(t), "renew")
	if err != nil || info.Token != l.Token || info.Waiters != 1 {
		t.Fatalf("Inspect = %+v, %v", info, err)
	}
	stopped := time.Now()
	select {
	case w := <-waiter:
		if w == nil {
			t.FailNow()
		}
		if time.Since(stopped) < l.TTL/4 {
			// The last renewal was sent before stopped; the lease ran for
			// at least a TTL after that send.
			t.Logf("waiter took over %v after renewals stopped", time.Since(stopped))
		}
		if w.Token <= l.Token {
			t.Errorf("token %d after %d", w.Token, l.Token)
		}
		release(t, c2, w)
	case <-time.After(guard):
		t.Fatal("waiter not served after the lease expired")
	}
	if _, err := c1.Renew(ctx(t), "renew", l.ID); !errors.Is(err, coord.ErrLeaseLost) {
		t.Errorf("Renew after expiry = %v, want ErrLeaseLost", err)
	}
}

// testExpiry: an unrenewed lease is held until its TTL from the send of its
// grant, then the lock is free and its key gone.
func testExpiry(t *testing.T, srv *etcdtest.Server, prefix string) {
	c := open(t, srv, prefix)
	l := acquire(t, c, "exp", coord.AcquireOptions{TTL: 1500 * time.Millisecond})
	if l.TTL != 2*time.Second {
		t.Errorf("TTL 1.5s granted as %v, want 2s (whole seconds, rounded up)", l.TTL)
	}
	for {
		info, err := c.Inspect(ctx(t), "exp")
		if err != nil {
			t.Fatal(err)
		}
		if !info.Held {
			if d := time.Since(l.Sent); d < l.TTL {
				t.Fatalf("free %v after the grant was sent, TTL %v", d, l.TTL)
			}
			break
		}
		if time.Since(l.Sent) > l.TTL+guard {
			t.Fatal("lease never expired")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if k := keys(t, srv.Client(t), prefix); len(k) != 0 {
		t.Errorf("keys after expiry: %v", k)
	}
}

// testRevoke: Revoke ends the holder's lease and hands the lock to the
// first waiter; on a free lock it is ErrNotHeld.
func testRevoke(t *testing.T, srv *etcdtest.Server, prefix string) {
	c1, c2, op := open(t, srv, prefix), open(t, srv, prefix), open(t, srv, prefix)
	if _, err := op.Revoke(ctx(t), "rv"); !errors.Is(err, coord.ErrNotHeld) {
		t.Fatalf("Revoke of a free lock = %v", err)
	}
	l := acquire(t, c1, "rv", coord.AcquireOptions{Holder: "victim"})
	queued := make(chan struct{})
	got := make(chan *coord.Lease, 1)
	go func() {
		w, err := c2.Acquire(ctx(t), "rv", coord.AcquireOptions{TTL: guard, Holder: "next", Wait: coord.WaitForever, OnWait: func(coord.LockInfo) { close(queued) }})
		if err != nil {
			t.Error(err)
		}
		got <- w
	}()
	<-queued
	info, err := op.Revoke(ctx(t), "rv")
	if err != nil || info.Holder != "victim" || info.LeaseID != l.ID || info.Waiters != 1 {
		t.Fatalf("Revoke = %+v, %v", info, err)
	}
	w := <-got
	if w == nil || w.Token <= l.Token {
		t.Fatalf("waiter after revoke: %+v", w)
	}
	if _, err := c1.Renew(ctx(t), "rv", l.ID); !errors.Is(err, coord.ErrLeaseLost) {
		t.Errorf("Renew of a revoked lease = %v", err)
	}
	release(t, c2, w)
}

// testWatch: events for acquisition, queueing, handoff and release, in
// order, and none for other prefixes.
func testWatch(t *testing.T, srv *etcdtest.Server, prefix string) {
	c1, c2, wc := open(t, srv, prefix), open(t, srv, prefix), open(t, srv, prefix)
	wctx, cancel := context.WithCancel(ctx(t))
	defer cancel()
	ch, err := wc.Watch(wctx, "w/")
	if err != nil {
		t.Fatal(err)
	}
	// expect reads the next event. Each step waits for its event before
	// the next change, so that the holder's lease is still alive when the
	// watcher reads its TTL.
	expect := func(want string) {
		t.Helper()
		select {
		case ev := <-ch:
			s := fmt.Sprintf("%s %s %s %d %d", ev.Type, ev.Info.Name, ev.Info.Holder, ev.Info.Token, ev.Info.Waiters)
			if s != want {
				t.Fatalf("event %q, want %q", s, want)
			}
			if ev.Info.Held && (ev.Info.TTL != guard || ev.Info.TTLLeft <= 0 || ev.Info.AcquiredAt.IsZero()) {
				t.Errorf("event %q: TTL %v, left %v, acquired at %v", s, ev.Info.TTL, ev.Info.TTLLeft, ev.Info.AcquiredAt)
			}
		case <-time.After(guard):
			t.Fatalf("no event (%s)", want)
		}
	}
	acquire(t, c1, "other", coord.AcquireOptions{}) // outside the watched prefix
	l1 := acquire(t, c1, "w/x", coord.AcquireOptions{Holder: "one"})
	expect(fmt.Sprintf("acquired w/x one %d 0", l1.Token))
	got := make(chan *coord.Lease, 1)
	go func() {
		l, err := c2.Acquire(ctx(t), "w/x", coord.AcquireOptions{TTL: guard, Holder: "two", Wait: coord.WaitForever})
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	expect(fmt.Sprintf("waiters w/x one %d 1", l1.Token))
	release(t, c1, l1)
	l2 := <-got
	if l2 == nil {
		t.FailNow()
	}
	// The handoff is one event; the new holder recording its acquired_at
	// is none.
	expect(fmt.Sprintf("acquired w/x two %d 0", l2.Token))
	release(t, c2, l2)
	expect("released w/x  0 0")
	cancel()
	for ev := range ch {
		t.Errorf("unexpected event %+v", ev)
	}
}

// testBadInput: bad names, TTLs and lease ids are ErrInvalid.
func testBadInput(t *testing.T, srv *etcdtest.Server, prefix string) {
	c := open(t, srv, prefix)
	if _, err := c.Acquire(ctx(t), "bad\x00", coord.AcquireOptions{TTL: time.Second}); !errors.Is(err, coord.ErrInvalid) {
		t.Errorf("bad name: %v", err)
	}
	if _, err := c.Acquire(ctx(t), "ok", coord.AcquireOptions{TTL: -time.Second}); !errors.Is(err, coord.ErrInvalid) {
		t.Errorf("negative TTL: %v", err)
	}
	for _, id := range []string{"", "xyz", "0", "-1", "ffffffffffffffff"} {
		if _, err := c.Renew(ctx(t), "ok", id); !errors.Is(err, coord.ErrInvalid) {
			t.Errorf("Renew with lease id %q: %v", id, err)
		}
		if err := c.Release(ctx(t), "ok", id); !errors.Is(err, coord.ErrInvalid) {
			t.Errorf("Release with lease id %q: %v", id, err)
		}
	}
	if _, err := etcd.New(ctx(t), nil); !errors.Is(err, coord.ErrInvalid) {
		t.Errorf("New without endpoints: %v", err)
	}
}

// testClose: closing the coordinator ends a waiting Acquire with
// ErrUnavailable and closes Watch channels.
func testClose(t *testing.T, srv *etcdtest.Server, prefix string) {
	c1, c2 := open(t, srv, prefix), open(t, srv, prefix)
	l := acquire(t, c1, "close", coord.AcquireOptions{})
	ch, err := c2.Watch(ctx(t), "")
	if err != nil {
		t.Fatal(err)
	}
	closeUnderWaiter(t, c2, "close", coord.AcquireOptions{TTL: guard})
	for range ch {
	}
	if _, err := c2.Inspect(ctx(t), "close"); !errors.Is(err, coord.ErrUnavailable) {
		t.Errorf("Inspect after Close = %v", err)
	}
	release(t, c1, l)
}

// TestTokensAcrossRestart: the token is the key's create revision, so it
// keeps increasing across a restart of the server; a lease held across the
// restart is still held, and a client opened before it still works.
func TestTokensAcrossRestart(t *testing.T) {
	srv := etcdtest.Start(t)
	c := open(t, srv, "/r/")
	var last uint64
	for i := 0; i < 3; i++ {
		l := acquire(t, c, "r", coord.AcquireOptions{})
		if l.Token <= last {
			t.Fatalf("token %d after %d", l.Token, last)
		}
		last = l.Token
		release(t, c, l)
	}
	held := acquire(t, c, "r", coord.AcquireOptions{TTL: time.Minute})
	c.Close()
	srv.Restart(t)
	c2 := open(t, srv, "/r/")
	info, err := c2.Inspect(ctx(t), "r")
	if err != nil || !info.Held || info.Token != held.Token {
		t.Fatalf("after restart: %+v, %v; want held with token %d", info, err, held.Token)
	}
	release(t, c2, held)
	l := acquire(t, c2, "r", coord.AcquireOptions{})
	if l.Token <= held.Token {
		t.Fatalf("token %d after the restart, %d before", l.Token, held.Token)
	}
	release(t, c2, l)
}

// TestUnreachable: New fails within its dial timeout with ErrUnavailable
// when an endpoint takes the connection and never answers.
func TestUnreachable(t *testing.T) {
	eps := []string{faultproxy.Silent(t)}
	start := time.Now()
	_, err := etcd.New(ctx(t), eps, etcd.WithDialTimeout(500*time.Millisecond))
	if !errors.Is(err, coord.ErrUnavailable) || !strings.Contains(err.Error(), "did not answer within 500ms") {
		t.Fatalf("New on a server that never answers = %v", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("New took %v with a 500ms dial timeout", d)
	}
	// The caller's context ending first is the caller's error.
	cctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := etcd.New(cctx, eps, etcd.WithDialTimeout(time.Minute)); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("New with an ending context = %v", err)
	}
	// ... also while it logs in (inside the etcd client, which is not
	// given ctx).
	cctx, cancel = context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start = time.Now()
	if _, err := etcd.New(cctx, eps, etcd.WithDialTimeout(time.Minute), etcd.WithAuth("u", "p")); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("New logging in with an ending context = %v", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("New logging in took %v with a context of 100ms", d)
	}
}

// refusedEndpoint is an endpoint that refuses connections: a stopped
// server's port.
func refusedEndpoint(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// TestRefusedAtOnce: when every endpoint refuses the connection, New says
// so at once, not "did not answer" after its dial timeout; with a user too
// (the login happens inside the etcd client). One endpoint that answers is
// enough for New to succeed; one that is silent leaves the timeout.
func TestRefusedAtOnce(t *testing.T) {
	const dial = 5 * time.Second
	srv := etcdtest.Start(t)
	stopped := etcdtest.Start(t)
	stoppedEps := stopped.Endpoints()
	stopped.Stop()
	for _, tc := range []struct {
		name string
		eps  []string
		user string
		want string
	}{
		{"one", []string{refusedEndpoint(t)}, "", ": connection refused"},
		{"stopped server", stoppedEps, "", ": connection refused"},
		{"every one", []string{refusedEndpoint(t), "http://" + refusedEndpoint(t)}, "", "connection refused by every endpoint"},
		{"with a user", []string{refusedEndpoint(t)}, "u", ": connection refused"},
		{"unix socket", []string{"unix://" + t.TempDir() + "/none.sock"}, "", "no such socket"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := []etcd.Option{etcd.WithDialTimeout(dial)}
			if tc.user != "" {
				opts = append(opts, etcd.WithAuth(tc.user, "p"))
			}
			start := time.Now()
			_, err := etcd.New(ctx(t), tc.eps, opts...)
			elapsed := time.Since(start)
			if !errors.Is(err, coord.ErrUnavailable) || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "did not answer") {
				t.Fatalf("New = %v, want it to say %q", err, tc.want)
			}
			t.Logf("%v after %v", err, elapsed)
			if elapsed > 2*time.Second { // generous: the dial timeout is 5s
				t.Errorf("reported after %v with a %v dial timeout", elapsed, dial)
			}
		})
	}
	t.Run("one answers", func(t *testing.T) {
		c, err := etcd.New(ctx(t), append([]string{refusedEndpoint(t)}, srv.Endpoints()...), etcd.WithDialTimeout(dial))
		if err != nil {
			t.Fatalf("New with one live endpoint: %v", err)
		}
		defer c.Close()
		l := acquire(t, c, "refused-then-live", coord.AcquireOptions{})
		release(t, c, l)
	})
	t.Run("one silent", func(t *testing.T) {
		_, err := etcd.New(ctx(t), []string{refusedEndpoint(t), faultproxy.Silent(t)}, etcd.WithDialTimeout(500*time.Millisecond))
		if err == nil || !strings.Contains(err.Error(), "did not answer within 500ms") {
			t.Fatalf("New = %v, want a timeout (one endpoint may still answer)", err)
		}
	})
}

// TestTLS: with client-certificate auth on, the backend works with the
// certificate and fails clearly without it.
func TestTLS(t *testing.T) {
	srv := etcdtest.Start(t, etcdtest.WithTLS())
	c, err := etcd.New(ctx(t), srv.Endpoints(), etcd.WithDialTimeout(5*time.Second), etcd.WithTLS(srv.ClientTLSConfig(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	l := acquire(t, c, "tls", coord.AcquireOptions{})
	release(t, c, l)

	noCert := srv.ClientTLSConfig(t)
	noCert.Certificates = nil
	if _, err := etcd.New(ctx(t), srv.Endpoints(), etcd.WithDialTimeout(time.Second), etcd.WithTLS(noCert)); !errors.Is(err, coord.ErrUnavailable) {
		t.Fatalf("New without a client certificate = %v, want ErrUnavailable", err)
	}
}

// TestAuth: a user with read-write on the prefix works; a user without
// permission, a wrong password and no credentials get one clear error at
// once, not a hang.
func TestAuth(t *testing.T) {
	srv := etcdtest.Start(t, etcdtest.WithAuth("rootpw"))
	root := srv.Client(t)
	setup := func(user, role, key string) {
		for _, err := range []error{
			func() error { _, err := root.UserAdd(ctx(t), user, user+"pw"); return err }(),
			func() error { _, err := root.RoleAdd(ctx(t), role); return err }(),
			func() error {
				_, err := root.RoleGrantPermission(ctx(t), role, key, clientv3.GetPrefixRangeEnd(key), clientv3.PermissionType(clientv3.PermReadWrite))
				return err
			}(),
			func() error { _, err := root.UserGrantRole(ctx(t), user, role); return err }(),
		} {
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	setup("app", "fence", "/fence/")
	setup("other", "elsewhere", "/elsewhere/")

	newC := func(user, pw string) (*etcd.Coordinator, error) {
		return etcd.Dial(ctx(t), srv.Endpoints(), etcd.WithDialTimeout(5*time.Second), etcd.WithAuth(user, pw))
	}
	c, err := newC("app", "apppw")
	if err != nil {
		t.Fatalf("user with permission: %v", err)
	}
	defer c.Close()
	l := acquire(t, c, "job", coord.AcquireOptions{})
	if _, err := c.Renew(ctx(t), "job", l.ID); err != nil {
		t.Fatal(err)
	}
	if infos, err := c.List(ctx(t), ""); err != nil || len(infos) != 1 {
		t.Fatalf("List = %v, %v", infos, err)
	}
	release(t, c, l)

	for _, tc := range []struct{ user, pw, want string }{
		{"other", "otherpw", `permission denied: user "other" may not use keys under "/fence/"`},
		{"app", "wrong", "authentication failed"},
		{"", "", "requires authentication"},
	} {
		start := time.Now()
		_, err := newC(tc.user, tc.pw)
		if !errors.Is(err, coord.ErrUnavailable) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New as %q = %v, want ErrUnavailable with %q", tc.user, err, tc.want)
		}
		if d := time.Since(start); d > 4*time.Second {
			t.Errorf("New as %q took %v: it should fail at once", tc.user, d)
		}
	}
}

// TestNoServerDependency: the backend does not link the etcd server.
func TestNoServerDependency(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/fence-dev/fence/pkg/coord/etcd").CombinedOutput()
	if err != nil {
		t.Skipf("go list: %v: %s", err, out)
	}
	for _, p := range strings.Fields(string(out)) {
		if strings.HasPrefix(p, "go.etcd.io/etcd/server/") || strings.Contains(p, "/internal/etcdtest") {
			t.Errorf("pkg/coord/etcd depends on %s", p)
		}
	}
}

// testWaiterLeaseRevoked: a waiter whose lease is revoked behind its back
// while its renewals are answered (as a leader resuming from a stall does,
// etcd#15247) takes a new place in the queue and gets the lock when the
// holder releases it, instead of giving up (issue 30).
func testWaiterLeaseRevoked(t *testing.T, srv *etcdtest.Server, prefix string) {
	c1, c2 := open(t, srv, prefix), open(t, srv, prefix)
	cli := srv.Client(t)
	l := acquire(t, c1, "wl", coord.AcquireOptions{})
	// waiterKey is the last key put on the lock when it is not the
	// holder's: the waiter's.
	waiterKey := func() *mvccpb.KeyValue {
		t.Helper()
		resp, err := cli.Get(ctx(t), prefix, clientv3.WithLastCreate()...)
		if err != nil || len(resp.Kvs) != 1 {
			t.Fatalf("waiter's key: %v, %v", resp, err)
		}
		if resp.Kvs[0].CreateRevision <= int64(l.Token) {
			return nil
		}
		return resp.Kvs[0]
	}
	queued := make(chan struct{})
	res := make(chan error, 1)
	go func() {
		_, err := c2.Acquire(ctx(t), "wl", coord.AcquireOptions{TTL: time.Second, Wait: coord.WaitForever, OnWait: func(coord.LockInfo) { close(queued) }})
		res <- err
	}()
	<-queued
	old := waiterKey()
	if _, err := cli.Revoke(ctx(t), clientv3.LeaseID(old.Lease)); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(guard); ; time.Sleep(20 * time.Millisecond) {
		select {
		case err := <-res:
			t.Fatalf("Acquire of a waiter whose lease was revoked = %v, want it queued again", err)
		default:
		}
		if kv := waiterKey(); kv != nil && kv.Lease != old.Lease {
			break // queued again, on a new lease
		}
		if time.Now().After(deadline) {
			t.Fatal("the waiter whose lease was revoked did not queue again")
		}
	}
	release(t, c1, l)
	select {
	case err := <-res:
		if err != nil {
			t.Errorf("Acquire of the re-queued waiter = %v, want the lock", err)
		}
	case <-time.After(guard):
		t.Fatal("the re-queued waiter did not get the free lock")
	}

}

// TestNewFromClient: a coordinator on the caller's own client (as
// concurrency.NewSession takes one) works as one from New, excludes one from
// New on the same keys, and its Close ends its waits and watches but leaves
// the client open: the caller can go on with it and open another
// coordinator on it.
func TestNewFromClient(t *testing.T) {
	srv := etcdtest.Start(t)
	const prefix = "/from-client/"
	cli := srv.Client(t)
	if _, err := etcd.NewFromClient(ctx(t), nil, etcd.WithPrefix(prefix)); !errors.Is(err, coord.ErrInvalid) {
		t.Errorf("NewFromClient(nil) = %v, want ErrInvalid", err)
	}
	own := open(t, srv, prefix)
	c, err := etcd.FromClient(ctx(t), cli, etcd.WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	if c.Client() != cli || c.Prefix() != prefix || c.Describe() != own.Describe() {
		t.Errorf("Client %p (want %p), Prefix %q, Describe %q (want %q)", c.Client(), cli, c.Prefix(), c.Describe(), own.Describe())
	}
	l := acquire(t, own, "shared", coord.AcquireOptions{})
	if _, err := c.Acquire(ctx(t), "shared", coord.AcquireOptions{}); !errors.Is(err, coord.ErrBusy) {
		t.Fatalf("Acquire of a lock held through New = %v, want ErrBusy", err)
	}
	mine := acquire(t, c, "mine", coord.AcquireOptions{})
	if _, err := c.Renew(ctx(t), "mine", mine.ID); err != nil {
		t.Fatalf("Renew: %v", err)
	}
	leaseCh, err := c.WatchLease(ctx(t), "mine", mine.ID)
	if err != nil {
		t.Fatal(err)
	}
	ch, err := c.Watch(ctx(t), "")
	if err != nil {
		t.Fatal(err)
	}
	closeUnderWaiter(t, c, "shared", coord.AcquireOptions{})
	for range ch {
	}
	for err := range leaseCh {
		t.Errorf("the lease watch reported %v at Close, want a close without a value", err)
	}
	// The client is the caller's: still open.
	if _, err := cli.Get(ctx(t), "anything"); err != nil {
		t.Fatalf("the client after Close: %v", err)
	}
	c2, err := etcd.NewFromClient(ctx(t), cli, etcd.WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	release(t, own, l)
	l2 := acquire(t, c2, "shared", coord.AcquireOptions{})
	release(t, c2, l2)
	release(t, c2, mine)
}

// closeUnderWaiter closes c while an Acquire of lock (opts, waiting
// forever) is queued on it, and checks that the Acquire ends at once with
// ErrUnavailable.
func closeUnderWaiter(t *testing.T, c *etcd.Coordinator, lock string, opts coord.AcquireOptions) {
	t.Helper()
	queued := make(chan struct{})
	res := make(chan error, 1)
	opts.Wait = coord.WaitForever
	opts.OnWait = func(coord.LockInfo) { close(queued) }
	go func() {
		_, err := c.Acquire(ctx(t), lock, opts)
		res <- err
	}()
	<-queued
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-res:
		if !errors.Is(err, coord.ErrUnavailable) {
			t.Errorf("waiting Acquire after Close = %v, want ErrUnavailable", err)
		}
	case <-time.After(guard):
		t.Fatal("waiting Acquire did not end at Close")
	}
}

// TestSemaphoreWaiterTakesAFreeSlot: a waiting caller of a semaphore that
// has a holder and free slots is granted one by its waiting path (whose
// transaction's answer holds the grant's puts, not the reads: reading the
// reads there panicked).
func TestSemaphoreWaiterTakesAFreeSlot(t *testing.T) {
	srv := etcdtest.Start(t)
	opts := func(h string) coord.AcquireOptions {
		return coord.AcquireOptions{Holder: h, Slots: 3, TTL: time.Minute, Wait: coord.WaitForever}
	}
	for i := range 3 {
		l, err := open(t, srv, "/sem/").Acquire(ctx(t), "backups", opts(fmt.Sprintf("h%d", i)))
		if err != nil {
			t.Fatalf("holder %d: %v", i, err)
		}
		if l.Slot != i {
			t.Errorf("holder %d got slot %d, want %d", i, l.Slot, i)
		}
	}
}
