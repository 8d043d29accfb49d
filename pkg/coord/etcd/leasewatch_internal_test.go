package etcd

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fence-dev/fence/internal/etcdtest"
	"github.com/fence-dev/fence/pkg/coord"
)

// lwGuard turns a hang into a failure; no assertion relies on it for timing.
const lwGuard = 20 * time.Second

func lwCoordinator(t *testing.T) (*coordinator, context.Context) {
	t.Helper()
	srv := etcdtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	c, err := dial(ctx, srv.Endpoints(), WithPrefix("/lw/"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, ctx
}

// watchOf starts the watch of l (as WatchLease does) and waits for its first
// read of the key; the watch is cancelled and drained at cleanup.
func watchOf(t *testing.T, c *coordinator, l *coord.Lease) <-chan error {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	id := mustID(t, l.ID)
	w := &leaseWatch{c: c, name: l.Name, id: id, key: c.leaseKey(l.Name, id)}
	looked := make(chan struct{}, 16)
	w.looked = func() { looked <- struct{}{} }
	ch := w.start(ctx, 0, 0)
	t.Cleanup(func() {
		cancel()
		for range ch {
		}
	})
	select {
	case <-looked:
	case <-time.After(lwGuard):
		t.Fatal("the watch never read the key")
	}
	return ch
}

// wantLost waits for the notice of a lost lease.
func wantLost(t *testing.T, ch <-chan error, what string) {
	t.Helper()
	select {
	case err, ok := <-ch:
		if !ok || !errors.Is(err, coord.ErrLeaseLost) {
			t.Fatalf("%s: got %v (open %v), want an error wrapping ErrLeaseLost", what, err, ok)
		}
	case <-time.After(lwGuard):
		t.Fatalf("%s: no notice", what)
	}
}

// wantQuiet fails when ch has spoken (a notice, or closed).
func wantQuiet(t *testing.T, ch <-chan error, what string) {
	t.Helper()
	select {
	case err, ok := <-ch:
		t.Fatalf("%s: the watch spoke: %v (open %v)", what, err, ok)
	default:
	}
}

// TestWatchLeaseRevokeAndDelete: the watch reports the end of its own
// lease's hold (revoked, or its key deleted from outside) and nothing that
// happens to other locks, even those whose names or keys begin with its own.
func TestWatchLeaseRevokeAndDelete(t *testing.T) {
	t.Parallel()
	c, ctx := lwCoordinator(t)
	opts := coord.AcquireOptions{TTL: time.Minute}
	acq := func(name string) *coord.Lease {
		t.Helper()
		l, err := c.Acquire(ctx, name, opts)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}

	a := acq("a")
	wa := watchOf(t, c, a)
	// The public entry, for the revoke of a neighbour below.
	pub, err := c.WatchLease(ctx, a.Name, a.ID)
	if err != nil {
		t.Fatal(err)
	}
	// Neighbours: other locks whose names begin with "a", and a foreign
	// key whose name begins with a's key. Their watches (or a direct read)
	// show that their changes went through before a's watch is checked.
	var others []<-chan error
	for _, name := range []string{"a/b", "ab", "a%"} {
		others = append(others, watchOf(t, c, acq(name)))
	}
	aKey := c.leaseKey("a", mustID(t, a.ID))
	if _, err := c.cli.Put(ctx, aKey+"0", "x"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.cli.Delete(ctx, aKey+"0"); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"a/b", "ab", "a%"} {
		if _, err := c.Revoke(ctx, name); err != nil {
			t.Fatal(err)
		}
	}
	for i, ch := range others {
		wantLost(t, ch, "neighbour "+[]string{"a/b", "ab", "a%"}[i])
	}
	time.Sleep(200 * time.Millisecond) // more room for a wrong notice
	wantQuiet(t, wa, `"a" after its neighbours were revoked`)
	wantQuiet(t, pub, `"a" (WatchLease) after its neighbours were revoked`)

	// Revoked (fence revoke): reported.
	if info, err := c.Revoke(ctx, "a"); err != nil || info.LeaseID != a.ID {
		t.Fatalf("Revoke(a) = %+v, %v", info, err)
	}
	t0 := time.Now()
	wantLost(t, wa, "revoked")
	t.Logf("notice after %v", time.Since(t0))
	wantLost(t, pub, "revoked (WatchLease)")

	// The key deleted from outside, the lease alive: reported.
	d := acq("del")
	wd := watchOf(t, c, d)
	if _, err := c.cli.Delete(ctx, c.leaseKey("del", mustID(t, d.ID))); err != nil {
		t.Fatal(err)
	}
	wantLost(t, wd, "key deleted")

	// Revoked before the watch started (the first read finds it gone):
	// reported.
	e := acq("early")
	if _, err := c.Revoke(ctx, "early"); err != nil {
		t.Fatal(err)
	}
	wantLost(t, watchOf(t, c, e), "revoked before the watch")

	// Cancelled: closed without a report.
	f := acq("cancelled")
	wctx, cancel := context.WithCancel(ctx)
	ch, err := c.WatchLease(wctx, f.Name, f.ID)
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	select {
	case err, ok := <-ch:
		if ok {
			t.Fatalf("cancelled watch reported %v", err)
		}
	case <-time.After(lwGuard):
		t.Fatal("a cancelled watch was not closed")
	}

	// Bad input.
	if _, err := c.WatchLease(ctx, "", f.ID); !errors.Is(err, coord.ErrInvalid) {
		t.Fatalf("empty name: %v", err)
	}
	if _, err := c.WatchLease(ctx, "x", "zz"); !errors.Is(err, coord.ErrInvalid) {
		t.Fatalf("bad lease id: %v", err)
	}
}

// TestWatchLeaseCompaction: a watch whose revision was compacted away is not
// a revocation: it reads the key again and goes on; only the key gone with
// its lease gone counts.
func TestWatchLeaseCompaction(t *testing.T) {
	t.Parallel()
	c, ctx := lwCoordinator(t)
	opts := coord.AcquireOptions{TTL: time.Minute}

	// follow starts a watch of l as if it had last seen revision from
	// (compacted by then), and returns its channel and a channel that gets
	// a value after each read of the key.
	follow := func(l *coord.Lease, from int64) (<-chan error, <-chan struct{}) {
		t.Helper()
		id := mustID(t, l.ID)
		w := &leaseWatch{c: c, name: l.Name, id: id, key: c.leaseKey(l.Name, id)}
		looked := make(chan struct{}, 16)
		w.looked = func() { looked <- struct{}{} }
		wctx, cancel := context.WithCancel(ctx)
		ch := w.start(wctx, int64(l.Token), from)
		t.Cleanup(func() {
			cancel()
			for range ch {
			}
		})
		return ch, looked
	}
	compact := func() {
		t.Helper()
		for range 3 { // revisions for the compaction to remove
			if _, err := c.cli.Put(ctx, "/lw/other", "x"); err != nil {
				t.Fatal(err)
			}
		}
		resp, err := c.cli.Get(ctx, "/lw/other")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.cli.Compact(ctx, resp.Header.Revision); err != nil {
			t.Fatal(err)
		}
	}
	waitLook := func(ch <-chan struct{}, w <-chan error) {
		t.Helper()
		select {
		case <-ch:
		case err, ok := <-w:
			t.Fatalf("the watch spoke before it read the key again: %v (open %v)", err, ok)
		case <-time.After(lwGuard):
			t.Fatal("the watch never read the key again")
		}
	}

	// The key is still there: the watch goes on, and still sees a revoke.
	a, err := c.Acquire(ctx, "a", opts)
	if err != nil {
		t.Fatal(err)
	}
	compact()
	wa, looked := follow(a, int64(a.Token))
	waitLook(looked, wa)
	time.Sleep(200 * time.Millisecond) // room for a wrong notice
	wantQuiet(t, wa, "after the compaction")
	if _, err := c.Revoke(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	wantLost(t, wa, "revoked after the compaction")

	// Revoked while the watch was behind: the read finds key and lease gone.
	b, err := c.Acquire(ctx, "b", opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Revoke(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	compact()
	wb, _ := follow(b, int64(b.Token))
	wantLost(t, wb, "revoked, then compacted")

	// The key deleted while the watch was behind, the lease alive: nothing
	// certain, so the watch ends without a report.
	k, err := c.Acquire(ctx, "k", opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.cli.Delete(ctx, c.leaseKey("k", mustID(t, k.ID))); err != nil {
		t.Fatal(err)
	}
	compact()
	wk, _ := follow(k, int64(k.Token))
	select {
	case err, ok := <-wk:
		if ok {
			t.Fatalf("key gone with its lease alive, after a compaction: reported %v", err)
		}
	case <-time.After(lwGuard):
		t.Fatal("the watch neither reported nor ended")
	}
}

func mustID(t *testing.T, s string) clientv3.LeaseID {
	t.Helper()
	id, err := parseID(s)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// readsOf counts the reads of one key made through a client's KV.
type readsOf struct {
	clientv3.KV
	key string
	n   chan struct{}
}

func (r *readsOf) Get(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	if key == r.key {
		r.n <- struct{}{}
	}
	return r.KV.Get(ctx, key, opts...)
}

// TestWatchLeaseOwnFromToken: a watch of a lease this coordinator put on
// the lock starts from the key's creation (its token) with no read first,
// and still reports what happened between the acquisition and the watch: a
// stop request, a revoke, the key deleted. A lease this coordinator did not
// acquire (or released since) is read first, as before.
func TestWatchLeaseOwnFromToken(t *testing.T) {
	t.Parallel()
	c, ctx := lwCoordinator(t)
	opts := coord.AcquireOptions{TTL: time.Minute}
	counted := func(c *coordinator, l *coord.Lease) *readsOf {
		t.Helper()
		r := &readsOf{KV: c.cli.KV, key: c.leaseKey(l.Name, mustID(t, l.ID)), n: make(chan struct{}, 16)}
		c.cli.KV = r
		t.Cleanup(func() { c.cli.KV = r.KV })
		return r
	}
	watch := func(c *coordinator, l *coord.Lease) <-chan error {
		t.Helper()
		ch, err := c.WatchLease(ctx, l.Name, l.ID)
		if err != nil {
			t.Fatal(err)
		}
		return ch
	}
	noRead := func(r *readsOf, what string) {
		t.Helper()
		if len(r.n) != 0 {
			t.Fatalf("%s: the watch of an own lease read its key %d time(s), want none", what, len(r.n))
		}
	}

	// A stop request before the watch (of a supervised lease: only those
	// are asked).
	a, err := c.Acquire(ctx, "own-asked", coord.AcquireOptions{TTL: time.Minute, Process: &coord.ProcessInfo{PIDs: []int{os.Getpid()}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, err := c.RequestStop(ctx, a.Name, a.Token); err != nil || !ok {
		t.Fatalf("RequestStop = %v, %v", ok, err)
	}
	r := counted(c, a)
	select {
	case err := <-watch(c, a):
		if !errors.Is(err, coord.ErrStopRequested) {
			t.Fatalf("stop requested before the watch: got %v, want ErrStopRequested", err)
		}
	case <-time.After(lwGuard):
		t.Fatal("a stop requested before the watch was not reported")
	}
	noRead(r, "stop request")
	c.cli.KV = r.KV

	// Revoked before the watch; the key deleted before the watch, the
	// lease alive.
	for _, before := range []struct {
		what string
		do   func(l *coord.Lease) error
	}{
		{"revoke", func(l *coord.Lease) error { _, err := c.cli.Revoke(ctx, mustID(t, l.ID)); return err }},
		{"delete", func(l *coord.Lease) error {
			_, err := c.cli.Delete(ctx, c.leaseKey(l.Name, mustID(t, l.ID)))
			return err
		}},
	} {
		l, err := c.Acquire(ctx, "own-"+before.what, opts)
		if err != nil {
			t.Fatal(err)
		}
		if err := before.do(l); err != nil {
			t.Fatal(err)
		}
		r = counted(c, l)
		wantLost(t, watch(c, l), before.what+" before the watch")
		noRead(r, before.what)
		c.cli.KV = r.KV
	}

	// Nothing happened: quiet, then the revoke is reported.
	q, err := c.Acquire(ctx, "own-quiet", opts)
	if err != nil {
		t.Fatal(err)
	}
	r = counted(c, q)
	wq := watch(c, q)
	time.Sleep(200 * time.Millisecond) // room for a wrong notice
	wantQuiet(t, wq, "an own lease, untouched")
	if _, err := c.Revoke(ctx, q.Name); err != nil {
		t.Fatal(err)
	}
	wantLost(t, wq, "revoked")
	noRead(r, "quiet")
	c.cli.KV = r.KV

	// Another coordinator's lease: read first.
	o, err := dial(ctx, c.cli.Endpoints(), WithPrefix("/lw/"))
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	f, err := c.Acquire(ctx, "foreign", opts)
	if err != nil {
		t.Fatal(err)
	}
	r = counted(o, f)
	wf := watch(o, f)
	select {
	case <-r.n:
	case <-time.After(lwGuard):
		t.Fatal("the watch of another coordinator's lease never read its key")
	}
	if _, err := c.Revoke(ctx, f.Name); err != nil {
		t.Fatal(err)
	}
	wantLost(t, wf, "another's lease, revoked")
}
