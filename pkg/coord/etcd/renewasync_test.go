package etcd_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/fence-dev/fence/internal/etcdtest"
	"github.com/fence-dev/fence/internal/faultproxy"
	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/coord/etcd"
)

type asyncResult struct {
	r   coord.Renewal
	err error
}

// renewAsync calls RenewAsync, and returns the channel of done's calls and
// the cancel func. The caller holds a lock during RenewAsync and cancel
// that done waits for: a done called on the caller's goroutine, inside
// RenewAsync or cancel, finds it held for good and reports an error instead
// of its result (it would deadlock a caller that holds its own lock).
func renewAsync(t *testing.T, c *etcd.Coordinator, name, id string) (<-chan asyncResult, func()) {
	t.Helper()
	var mu sync.Mutex
	ch := make(chan asyncResult, 2)
	mu.Lock()
	cancel := c.RenewAsync(name, id, func(r coord.Renewal, err error) {
		for deadline := time.Now().Add(5 * time.Second); !mu.TryLock(); time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				ch <- asyncResult{err: fmt.Errorf("done was called on the caller's goroutine (result: %+v, %v)", r, err)}
				return
			}
		}
		mu.Unlock()
		ch <- asyncResult{r, err}
	})
	mu.Unlock()
	return ch, func() {
		mu.Lock()
		defer mu.Unlock()
		cancel()
	}
}

func await(t *testing.T, ch <-chan asyncResult) asyncResult {
	t.Helper()
	select {
	case res := <-ch:
		// done is called once: no second call follows.
		select {
		case again := <-ch:
			t.Fatalf("done called twice: %+v, then %+v", res, again)
		case <-time.After(50 * time.Millisecond):
		}
		return res
	case <-time.After(guard):
		t.Fatal("done was not called")
		return asyncResult{}
	}
}

// TestRenewAsync: RenewAsync answers as Renew does (the send time, the
// granted TTL; ErrLeaseLost for a lease that ended or a lease id given with
// the wrong lock; the argument and closed-coordinator errors), through done
// called exactly once and never on the caller's goroutine; leases another
// coordinator put on the lock are renewed too (read first).
func TestRenewAsync(t *testing.T) {
	t.Parallel()
	srv := etcdtest.Start(t)
	c := open(t, srv, "/renew-async/")
	l := acquire(t, c, "a", coord.AcquireOptions{TTL: 20 * time.Second})
	for i := 0; i < 3; i++ { // the first may open the stream, the next use it
		start := time.Now()
		ch, _ := renewAsync(t, c, l.Name, l.ID)
		res := await(t, ch)
		if res.err != nil {
			t.Fatalf("RenewAsync: %v", res.err)
		}
		if res.r.Sent.Before(start) || res.r.Sent.After(time.Now()) || res.r.TTL != 20*time.Second {
			t.Fatalf("RenewAsync = %+v: Sent outside the call or wrong TTL", res.r)
		}
	}

	other := open(t, srv, "/renew-async/")
	if res := await(t, first(renewAsync(t, other, l.Name, l.ID))); res.err != nil {
		t.Errorf("RenewAsync through another coordinator: %v", res.err)
	}
	acquire(t, c, "b", coord.AcquireOptions{TTL: 20 * time.Second})
	if res := await(t, first(renewAsync(t, other, "b", l.ID))); !errors.Is(res.err, coord.ErrInvalid) || errors.Is(res.err, coord.ErrLeaseLost) {
		t.Errorf("RenewAsync with the wrong lock = %v, want ErrInvalid (the lease of another lock)", res.err)
	}
	if res := await(t, first(renewAsync(t, c, "", l.ID))); !errors.Is(res.err, coord.ErrInvalid) {
		t.Errorf("RenewAsync with no name = %v, want ErrInvalid", res.err)
	}

	if _, err := c.Revoke(ctx(t), "a"); err != nil {
		t.Fatal(err)
	}
	if res := await(t, first(renewAsync(t, c, l.Name, l.ID))); !errors.Is(res.err, coord.ErrLeaseLost) {
		t.Errorf("RenewAsync of a revoked lease = %v, want ErrLeaseLost", res.err)
	}

	closed := open(t, srv, "/renew-async/")
	l2 := acquire(t, closed, "c", coord.AcquireOptions{TTL: 20 * time.Second})
	closed.Close()
	if res := await(t, first(renewAsync(t, closed, l2.Name, l2.ID))); !errors.Is(res.err, coord.ErrUnavailable) {
		t.Errorf("RenewAsync on a closed coordinator = %v, want ErrUnavailable", res.err)
	}
}

func first(ch <-chan asyncResult, _ func()) <-chan asyncResult { return ch }

// TestRenewAsyncCancel: a renewal that hangs on a dead connection is
// abandoned by its cancel (done gets an error wrapping context.Canceled,
// once), the stuck stream is dropped, and renewals succeed again once the
// network heals.
func TestRenewAsyncCancel(t *testing.T) {
	t.Parallel()
	c, pxs := openProxied(t, etcdtest.Start(t), 1)
	px := pxs[0]
	l := acquire(t, c, "p", coord.AcquireOptions{TTL: 20 * time.Second})
	if res := await(t, first(renewAsync(t, c, l.Name, l.ID))); res.err != nil {
		t.Fatal(res.err) // the stream is open
	}

	px.SetMode(faultproxy.BlackholeBoth)
	ch, cancel := renewAsync(t, c, l.Name, l.ID)
	select {
	case res := <-ch:
		t.Fatalf("a renewal through a dead connection was answered: %+v", res)
	case <-time.After(300 * time.Millisecond):
	}
	cancel()
	cancel() // twice is allowed
	if res := await(t, ch); !errors.Is(res.err, context.Canceled) {
		t.Fatalf("abandoned renewal = %v, want context.Canceled", res.err)
	}

	px.SetMode(faultproxy.Pass)
	for deadline := time.Now().Add(guard / 2); ; {
		ch, cancel := renewAsync(t, c, l.Name, l.ID)
		select {
		case res := <-ch:
			if res.err == nil {
				return
			}
			if errors.Is(res.err, coord.ErrLeaseLost) {
				t.Fatalf("renewal after the partition healed: %v", res.err)
			}
		case <-time.After(time.Second):
			cancel()
			<-ch
		}
		if time.Now().After(deadline) {
			t.Fatal("no renewal succeeded after the partition healed")
		}
	}
}
