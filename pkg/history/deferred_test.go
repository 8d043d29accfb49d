package history_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/coord/local"
	"github.com/fence-dev/fence/pkg/history"
	"github.com/fence-dev/fence/pkg/history/localstore"
)

// TestAcquireDeferred: an acquisition recorded after AcquireDeferred
// returned is on record, in order, before anything that follows it through
// the Recorder: a release at once, a revoke, a record, or Close.
func TestAcquireDeferred(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			deferred := func(t *testing.T, r history.Recorder, lock, holder string, ttl time.Duration) *coord.Lease {
				t.Helper()
				l, err := r.AcquireDeferred(ctxT(t), lock, coord.AcquireOptions{TTL: ttl, Holder: holder, Wait: coord.WaitForever})
				if err != nil {
					t.Fatal(err)
				}
				return l
			}
			t.Run("ReleaseAtOnce", func(t *testing.T) {
				r := b.open(t)
				l := deferred(t, r, "d-rel", "alice", 10*time.Second)
				if err := r.Release(ctxT(t), "d-rel", l.ID); err != nil {
					t.Fatal(err)
				}
				if got, want := kinds(t, r, "d-rel"), fmt.Sprintf("acquired:alice:%d released:alice:%d", l.Token, l.Token); got != want {
					t.Fatalf("history %s, want %s", got, want)
				}
			})
			t.Run("RecordAtOnce", func(t *testing.T) {
				r := b.open(t)
				l := deferred(t, r, "d-rec", "alice", 10*time.Second)
				if err := r.Record(ctxT(t), history.Event{Lock: "d-rec", Kind: history.DeadlineExceeded, Holder: "alice", Token: l.Token}); err != nil {
					t.Fatal(err)
				}
				if err := r.Release(ctxT(t), "d-rec", l.ID); err != nil {
					t.Fatal(err)
				}
				want := fmt.Sprintf("acquired:alice:%d deadline_exceeded:alice:%d released:alice:%d", l.Token, l.Token, l.Token)
				if got := kinds(t, r, "d-rec"); got != want {
					t.Fatalf("history %s, want %s", got, want)
				}
			})
			t.Run("RevokeAtOnce", func(t *testing.T) {
				r := b.open(t)
				l := deferred(t, r, "d-rev", "alice", 10*time.Second)
				if _, err := r.Revoke(ctxT(t), "d-rev"); err != nil {
					t.Fatal(err)
				}
				if got, want := kinds(t, r, "d-rev"), fmt.Sprintf("acquired:alice:%d revoked:alice:%d", l.Token, l.Token); got != want {
					t.Fatalf("history %s, want %s", got, want)
				}
			})
			t.Run("CloseAtOnce", func(t *testing.T) {
				r := b.open(t)
				l := deferred(t, r, "d-close", "alice", 10*time.Second)
				r.Close()
				if got, want := kinds(t, b.open(t), "d-close"), fmt.Sprintf("acquired:alice:%d", l.Token); got != want {
					t.Fatalf("history %s, want %s", got, want)
				}
			})
			t.Run("AfterExpiry", func(t *testing.T) {
				a := b.open(t)
				la := acquire(t, a, "d-exp", "frozen", b.shortTTL)
				r := b.open(t)
				lb := deferred(t, r, "d-exp", "successor", 30*time.Second)
				if err := r.Release(ctxT(t), "d-exp", lb.ID); err != nil {
					t.Fatal(err)
				}
				want := fmt.Sprintf("acquired:frozen:%d expired:frozen:%d acquired:successor:%d released:successor:%d", la.Token, la.Token, lb.Token, lb.Token)
				if got := kinds(t, r, "d-exp"); got != want {
					t.Fatalf("history %s, want %s", got, want)
				}
			})
		})
	}
}

// blockingStore is a history store whose writes wait until unblocked: a
// slow disk or a slow etcd.
type blockingStore struct {
	history.Store
	writing chan struct{} // closed at the first write
	unblock chan struct{}
}

func (s *blockingStore) block() {
	if s.writing != nil {
		select {
		case <-s.writing:
		default:
			close(s.writing)
		}
	}
	<-s.unblock
}

func (s *blockingStore) Record(ctx context.Context, ev history.Event) error {
	s.block()
	return s.Store.Record(ctx, ev)
}

func (s *blockingStore) Append(ctx context.Context, evs []history.Event) error {
	s.block()
	return s.Store.Append(ctx, evs)
}

// TestAcquireDeferredDoesNotWait: AcquireDeferred returns while the history
// write is held up, and the lease is not released before its acquisition is
// on record (a successor would take the missing record for an expiry).
func TestAcquireDeferredDoesNotWait(t *testing.T) {
	c, ls := localWithStore(t)
	store := &blockingStore{Store: ls, writing: make(chan struct{}), unblock: make(chan struct{})}
	r := history.Wrap(c, store, history.WithRecordTimeout(time.Minute))
	defer r.Close()
	unblocked := false
	defer func() {
		if !unblocked {
			close(store.unblock)
		}
	}()

	got := make(chan *coord.Lease, 1)
	go func() {
		l, err := r.AcquireDeferred(ctxT(t), "slow", coord.AcquireOptions{TTL: time.Minute, Holder: "h"})
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	var l *coord.Lease
	select {
	case l = <-got:
	case <-time.After(30 * time.Second): // hang guard
		t.Fatal("AcquireDeferred waited for the history store")
	}
	if l == nil {
		t.FailNow()
	}
	<-store.writing // the record is under way, held up

	released := make(chan error, 1)
	go func() { released <- r.Release(ctxT(t), "slow", l.ID) }()
	for range 5 { // while the record is held up, the lease stays
		select {
		case err := <-released:
			t.Fatalf("Release returned before the acquisition was on record: %v", err)
		case <-time.After(20 * time.Millisecond):
		}
		if info, err := c.Inspect(ctxT(t), "slow"); err != nil || !info.Held || info.LeaseID != l.ID {
			t.Fatalf("the lease ended before its acquisition was on record: %+v, %v", info, err)
		}
	}
	unblocked = true
	close(store.unblock)
	if err := <-released; err != nil {
		t.Fatal(err)
	}
	if got, want := kinds(t, ls, "slow"), fmt.Sprintf("acquired:h:%d released:h:%d", l.Token, l.Token); got != want {
		t.Fatalf("history %s, want %s", got, want)
	}
}

// slowSyncStore is a local history store whose fsyncs wait until
// unblocked (a slow disk): Append returns, and AppendLater's sync, only
// then. Its AppendRelease is the local store's own.
type slowSyncStore struct {
	history.Store
	syncing chan struct{} // closed when the first fsync waits
	unblock chan struct{}
}

func (s *slowSyncStore) slowSync() {
	select {
	case <-s.syncing:
	default:
		close(s.syncing)
	}
	<-s.unblock
}

func (s *slowSyncStore) Append(ctx context.Context, evs []history.Event) error {
	err := s.Store.Append(ctx, evs)
	s.slowSync()
	return err
}

func (s *slowSyncStore) AppendLater(ctx context.Context, evs []history.Event) (func() error, error) {
	sync, err := s.Store.(interface {
		AppendLater(context.Context, []history.Event) (func() error, error)
	}).AppendLater(ctx, evs)
	return func() error { s.slowSync(); return sync() }, err
}

func (s *slowSyncStore) AppendRelease(ctx context.Context, c coord.Coordinator, leaseID string, token uint64, ev history.Event) (bool, error) {
	return s.Store.(interface {
		AppendRelease(context.Context, coord.Coordinator, string, uint64, history.Event) (bool, error)
	}).AppendRelease(ctx, c, leaseID, token, ev)
}

// TestAcquireDeferredReleaseSkipsTheFsync: on the local store, a release
// after AcquireDeferred waits for the acquisition's record to be written,
// not for its fsync (the release's own record, fsynced with the release,
// makes both durable): with that fsync held up, the release completes and
// the history reads acquired then released; Close waits for the fsync.
// Before, the release waited for it (a short command paid two fsyncs of
// the history after it ended).
func TestAcquireDeferredReleaseSkipsTheFsync(t *testing.T) {
	c, ls := localWithStore(t)
	store := &slowSyncStore{Store: ls, syncing: make(chan struct{}), unblock: make(chan struct{})}
	r := history.Wrap(c, store, history.WithRecordTimeout(time.Minute))
	unblocked := false
	defer func() {
		if !unblocked {
			close(store.unblock)
		}
	}()
	l, err := r.AcquireDeferred(ctxT(t), "slowsync", coord.AcquireOptions{TTL: time.Minute, Holder: "h"})
	if err != nil {
		t.Fatal(err)
	}
	<-store.syncing // the acquisition is written, its fsync held up
	released := make(chan error, 1)
	go func() { released <- r.Release(ctxT(t), "slowsync", l.ID) }()
	select {
	case err := <-released:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Release waited for the fsync of the acquisition's record")
	}
	if got, want := kinds(t, ls, "slowsync"), fmt.Sprintf("acquired:h:%d released:h:%d", l.Token, l.Token); got != want {
		t.Fatalf("history %s, want %s", got, want)
	}
	closed := make(chan error, 1)
	go func() { closed <- r.Close() }()
	select {
	case err := <-closed:
		t.Fatalf("Close returned before the fsync it put off: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	unblocked = true
	close(store.unblock)
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
}

// localWithStore opens a local coordinator and the history store of its
// state directory, in a directory of the test's own.
func localWithStore(t *testing.T) (coord.Coordinator, history.Store) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "state")
	c, err := local.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	ls, err := localstore.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	return c, ls
}
