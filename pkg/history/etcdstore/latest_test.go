package etcdstore

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fence-dev/fence/internal/etcdtest"
	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/coord/etcd"
	"github.com/fence-dev/fence/pkg/history"
	"github.com/fence-dev/fence/pkg/history/historytest"
)

// countingKV counts the requests made through a client's KV.
type countingKV struct {
	clientv3.KV
	n atomic.Int64
}

func (k *countingKV) Get(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	k.n.Add(1)
	return k.KV.Get(ctx, key, opts...)
}

func (k *countingKV) Do(ctx context.Context, op clientv3.Op) (clientv3.OpResponse, error) {
	k.n.Add(1)
	return k.KV.Do(ctx, op)
}

func (k *countingKV) Txn(ctx context.Context) clientv3.Txn {
	k.n.Add(1)
	return k.KV.Txn(ctx)
}

// counted returns a client of srv whose KV requests are counted.
func counted(t *testing.T, srv *etcdtest.Server) (*clientv3.Client, *countingKV) {
	t.Helper()
	cli := srv.Client(t)
	c, err := clientv3.New(clientv3.Config{Endpoints: cli.Endpoints(), DialTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	k := &countingKV{KV: c.KV}
	c.KV = k
	return c, k
}

// TestLatest: Latest keeps what the next write needs (that it returns what
// History does is historytest's "Latest"): after it, an append is one
// transaction (without it, a store new to the lock reads first: two); after
// another writer came in between, the append still loses nothing.
func TestLatest(t *testing.T) {
	srv := etcdtest.Start(t)
	cli, kv := counted(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	p := newPrefix()
	clk := historytest.NewClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	opts := []history.Option{historytest.WithMaxEvents(40), historytest.WithMaxAge(time.Hour), historytest.WithClock(clk.Now)}
	w, err := newStore(srv.Client(t), p, opts...)
	if err != nil {
		t.Fatal(err)
	}
	fresh := func() *store { // a store of cli that knows nothing of the lock yet
		t.Helper()
		s, err := newStore(cli, p, opts...)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	record := func(s *store, token uint64, at time.Time) {
		t.Helper()
		if err := s.Record(ctx, history.Event{Time: at, Lock: "l", Kind: history.Acquired, Holder: "h", Token: token}); err != nil {
			t.Fatal(err)
		}
	}
	for i := uint64(1); i <= 50; i++ {
		record(w, i, clk.Now())
		clk.Advance(10 * time.Second)
	}

	// The append after Latest: one request. Without Latest: two.
	appendCost := func(s *store, token uint64) int64 {
		t.Helper()
		before := kv.n.Load()
		record(s, token, clk.Now())
		return kv.n.Load() - before
	}
	s := fresh()
	if n := appendCost(s, 60); n != 2 {
		t.Fatalf("an append by a store new to the lock made %d requests, want 2 (read, write): the count is off", n)
	}
	s = fresh()
	before := kv.n.Load()
	if _, err := s.Latest(ctx, "l", 32); err != nil {
		t.Fatal(err)
	}
	if n := kv.n.Load() - before; n != 1 {
		t.Fatalf("Latest made %d requests, want 1", n)
	}
	if n := appendCost(s, 61); n != 1 {
		t.Fatalf("an append after Latest made %d requests, want 1: Latest did not keep the head for it", n)
	}

	// Another writer between Latest and the append: the append reads again
	// and loses nothing.
	s = fresh()
	if _, err := s.Latest(ctx, "l", 32); err != nil {
		t.Fatal(err)
	}
	record(w, 62, clk.Now())
	if n := appendCost(s, 63); n != 2 {
		t.Fatalf("an append on a moved head made %d requests, want 2 (the write refused with the new head, then the write)", n)
	}
	evs, err := w.History(ctx, "l", 3)
	if err != nil || len(evs) != 3 || evs[0].Token != 61 || evs[1].Token != 62 || evs[2].Token != 63 {
		t.Fatalf("last events %+v, %v; want tokens 61, 62, 63", evs, err)
	}
}

// TestAcquisitionRecordCost: a Recorder over the etcd coordinator records an
// acquisition of a free lock (its look at the lock's last lease event, then
// the acquired event) with one KV request after the transaction that takes
// the lock, which makes the look; the release with its event is one.
func TestAcquisitionRecordCost(t *testing.T) {
	srv := etcdtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cli, kv := counted(t, srv)
	prefix := newPrefix()
	for round := range 3 { // each round the coordinator, store and Recorder of a new process
		r := recorderOf(t, ctx, cli, prefix)
		before := kv.n.Load()
		lease, err := r.Acquire(ctx, "job", coord.AcquireOptions{TTL: 10 * time.Second, Holder: "alice"})
		if err != nil {
			t.Fatal(err)
		}
		acquired := kv.n.Load() - before
		before = kv.n.Load()
		if err := r.Release(ctx, "job", lease.ID); err != nil {
			t.Fatal(err)
		}
		released := kv.n.Load() - before
		r.Close()
		t.Logf("round %d: %d KV requests for the acquisition and its record, %d for the release and its event", round, acquired, released)
		// The acquisition is one transaction; its record a read of the
		// history's head and the append: three in all.
		if acquired != 3 || released != 1 {
			t.Fatalf("round %d: %d KV requests to acquire and record, %d to release; want 3 and 1", round, acquired, released)
		}
	}
	evs, err := newStoreLike(t, cli, prefix).History(ctx, "job", 0)
	if err != nil || len(evs) != 6 {
		t.Fatalf("history %+v, %v; want 3 acquired and released pairs", evs, err)
	}

	// A waiter: its queueing transaction, its claim at its turn, the
	// record's read and write: four, counted on its own client (the
	// holder's is another).
	holder := recorderOf(t, ctx, srv.Client(t), prefix)
	defer holder.Close()
	hl, err := holder.Acquire(ctx, "job", coord.AcquireOptions{TTL: 10 * time.Second, Holder: "bob"})
	if err != nil {
		t.Fatal(err)
	}
	r := recorderOf(t, ctx, cli, prefix)
	defer r.Close()
	before := kv.n.Load()
	if err := acquireAfter(t, ctx, r, "carol", func() error { return holder.Release(ctx, "job", hl.ID) }); err != nil {
		t.Fatal(err)
	}
	// Four; a fifth when the waiter reads its turn again because its first
	// look came before the release committed (seen under -race on a loaded
	// 2-core host). More is a request added to the waiter's way.
	if n := kv.n.Load() - before; n < 4 || n > 5 {
		t.Fatalf("a waiter made %d KV requests to queue, claim and record, want 4 (5 when its look races the release)", n)
	}
	evs, err = newStoreLike(t, cli, prefix).History(ctx, "job", 3)
	if err != nil || len(evs) != 3 || evs[0].Kind != history.Acquired || evs[1].Kind != history.Released || evs[2].Kind != history.Acquired || evs[2].Holder != "carol" {
		t.Fatalf("history %+v, %v; want bob's acquired and released, then carol's acquired", evs, err)
	}
}

// acquireAfter acquires lock job on c as holder, waiting: once c is
// queued it calls release (the holder's), and returns c's error.
func acquireAfter(t *testing.T, ctx context.Context, c coord.Coordinator, holder string, release func() error) error {
	t.Helper()
	queued := make(chan struct{})
	got := make(chan error, 1)
	go func() {
		_, err := c.Acquire(ctx, "job", coord.AcquireOptions{TTL: 10 * time.Second, Holder: holder, Wait: coord.WaitForever,
			OnWait: func(coord.LockInfo) { close(queued) }})
		got <- err
	}()
	select {
	case <-queued:
	case err := <-got:
		return err // it did not queue
	}
	if err := release(); err != nil {
		t.Fatal(err)
	}
	return <-got
}

// recorderOf is the Recorder of a process on cli: its coordinator
// (etcd.NewFromClient) and its store under prefix.
func recorderOf(t *testing.T, ctx context.Context, cli *clientv3.Client, prefix string) history.Recorder {
	t.Helper()
	c, err := etcd.NewFromClient(ctx, cli, etcd.WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	return history.Wrap(c, newStoreLike(t, cli, etcd.NormalPrefix(prefix)))
}

// clientOf returns the client and prefix of c, a coordinator of package
// etcd.
func clientOf(c coord.Coordinator) (*clientv3.Client, string) {
	ec := c.(interface {
		Client() *clientv3.Client
		Prefix() string
	})
	return ec.Client(), ec.Prefix()
}

func newStoreLike(t *testing.T, cli *clientv3.Client, prefix string) *store {
	t.Helper()
	s, err := newStore(cli, prefix)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestAcquireWithoutHistoryPermission: recording never fails a lease. A
// user who may use the locks but not read the history still acquires
// through the Recorder, although the transaction that takes the lock would
// read the history's head: etcd refuses that read; only the record fails
// (logged).
func TestAcquireWithoutHistoryPermission(t *testing.T) {
	srv := etcdtest.Start(t, etcdtest.WithAuth("rootpw"))
	root := srv.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	steps := []func() error{
		func() error { _, err := root.UserAdd(ctx, "app", "apppw"); return err },
		func() error { _, err := root.RoleAdd(ctx, "locks-only"); return err },
		func() error { _, err := root.UserGrantRole(ctx, "app", "locks-only"); return err },
	}
	for _, p := range []string{"/fence/locks/", "/fence/limits/"} {
		steps = append(steps, func() error {
			_, err := root.RoleGrantPermission(ctx, "locks-only", p, clientv3.GetPrefixRangeEnd(p), clientv3.PermissionType(clientv3.PermReadWrite))
			return err
		})
	}
	for _, step := range steps {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	c, err := etcd.New(ctx, srv.Endpoints(), etcd.WithDialTimeout(5*time.Second), etcd.WithAuth("app", "apppw"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := newStore(clientOf(c))
	if err != nil {
		t.Fatal(err)
	}
	var logged bytes.Buffer // the Recorder's warnings: a write it could not make is one
	r := history.Wrap(c, s, history.WithLogger(slog.New(slog.NewTextHandler(&logged, &slog.HandlerOptions{Level: slog.LevelWarn}))))
	defer r.Close()
	l, err := r.Acquire(ctx, "job", coord.AcquireOptions{TTL: 10 * time.Second, Holder: "app"})
	if err != nil {
		t.Fatalf("Acquire without permission on the history: %v", err)
	}
	if err := r.Release(ctx, "job", l.ID); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logged.String(), "could not record event") {
		t.Errorf("no write failed: the history was written without permission? log: %s", logged.String())
	}

	// A waiter's claim, which would read the head too.
	rc, err := etcd.New(ctx, srv.Endpoints(), etcd.WithDialTimeout(5*time.Second), etcd.WithAuth("root", "rootpw"))
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	hl, err := rc.Acquire(ctx, "job", coord.AcquireOptions{TTL: 10 * time.Second, Holder: "root"})
	if err != nil {
		t.Fatal(err)
	}
	if err := acquireAfter(t, ctx, r, "app", func() error { return rc.Release(ctx, "job", hl.ID) }); err != nil {
		t.Fatalf("a waiter without permission on the history: %v", err)
	}
}
