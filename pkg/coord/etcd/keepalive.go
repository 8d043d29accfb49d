package etcd

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// keeper renews leases over one LeaseKeepAlive stream that every lease of
// the Coordinator shares, as etcd's own lessor does: a renewal is one small
// message on an open stream, not a new stream (KeepAliveOnce opens one per
// call, which costs a stream set-up on both sides).
//
// Unlike the lessor, a renewal here is a request and its answer: the caller
// records the send time before the request is queued, and gets the TTL that
// etcd granted from that renewal's own response. etcd answers the requests
// of one stream in order, so the answer to a lease's renewal is the first
// response for that lease after the request. Every safety bound fence
// computes (acknowledged send time + TTL) stays what it was with
// KeepAliveOnce.
//
// A renewal is a waiter: a callback that the stream's receiver calls with
// the answer (start, for RenewAsync: no goroutine waits), or that hands the
// answer to a blocked caller (renew). A stream that fails fails every
// renewal waiting on it, and the next renewal opens a new one. A renewal
// whose caller gives up while the stream has answered nothing since the
// request was sent resets the stream: a stream stuck on a dead connection
// must not hold every later renewal.
type keeper struct {
	cli  *clientv3.Client
	open chan struct{} // a one-slot lock: who holds it may open the stream
	mu   sync.Mutex
	cur  *kaStream
}

// kaStream is one LeaseKeepAlive stream, its sender and its receiver.
type kaStream struct {
	stream pb.Lease_LeaseKeepAliveClient
	cancel context.CancelFunc
	kick   chan struct{} // one slot: requests were queued
	done   chan struct{} // closed when the stream failed or was reset

	mu       sync.Mutex
	queue    []int64 // requests not yet taken by the sender, in order
	pending  map[int64][]*kaWaiter
	err      error     // why the stream ended, once done
	lastRecv time.Time // when the last response arrived
}

// kaWaiter is one renewal waiting for its answer. fire delivers the answer
// (ttl <= 0: the lease is not found) or an error, once.
type kaWaiter struct {
	done  func(ttl int64, err error)
	fired atomic.Bool
}

func (w *kaWaiter) fire(ttl int64, err error) {
	if w.fired.CompareAndSwap(false, true) {
		w.done(ttl, err)
	}
}

type kaResult struct {
	ttl int64 // <= 0: the lease is not found
	err error
}

// errAbandoned is the result of a renewal abandoned by its caller (start's
// cancel).
var errAbandoned = fmt.Errorf("keep-alive abandoned: %w", context.Canceled)

func newKeeper(cli *clientv3.Client) *keeper {
	return &keeper{cli: cli, open: make(chan struct{}, 1)}
}

// renew sends one keep-alive for id and returns the TTL etcd granted (0
// when the lease is gone), or the stream's or ctx's error.
func (k *keeper) renew(ctx context.Context, id clientv3.LeaseID) (int64, error) {
	s, err := k.stream(ctx)
	if err != nil {
		return 0, err
	}
	ch := make(chan kaResult, 1)
	w := &kaWaiter{done: func(ttl int64, err error) { ch <- kaResult{ttl: ttl, err: err} }}
	queued, err := s.enqueue(int64(id), w)
	if err != nil {
		return 0, err
	}
	select {
	case r := <-ch:
		return r.ttl, r.err
	case <-ctx.Done():
		if w.fired.CompareAndSwap(false, true) {
			k.resetIfStuck(s, queued)
		}
		return 0, ctx.Err()
	}
}

// start sends one keep-alive for id without waiting: done is called once,
// with what renew would return, on another goroutine (the stream's
// receiver, mostly), never on the caller's. The returned func
// abandons the renewal: done then gets errAbandoned unless it had its
// answer. Neither start nor its abandon func ever blocks or calls done
// itself: when no stream is open, the opening and the renewal run on a
// goroutine of their own.
func (k *keeper) start(id clientv3.LeaseID, done func(ttl int64, err error)) (abandon func()) {
	s := k.current()
	if s == nil {
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			ttl, err := k.renew(ctx, id)
			if ctx.Err() != nil {
				err = errAbandoned
			}
			cancel()
			done(ttl, err)
		}()
		return cancel
	}
	w := &kaWaiter{done: done}
	queued, err := s.enqueue(int64(id), w)
	if err != nil {
		w.fired.Store(true)
		go done(0, err)
		return func() {}
	}
	return func() {
		if w.fired.CompareAndSwap(false, true) {
			go func() {
				done(0, errAbandoned)
				k.resetIfStuck(s, queued)
			}()
		}
	}
}

// enqueue queues a request for id, whose answer goes to w, and returns when
// it was queued, or the error of a stream that has ended.
func (s *kaStream) enqueue(id int64, w *kaWaiter) (time.Time, error) {
	queued := time.Now()
	// The request and its waiter are queued under one lock, so that the
	// order of the waiters of a lease is the order of their requests on the
	// stream, hence of the answers.
	s.mu.Lock()
	if s.err != nil {
		err := s.err
		s.mu.Unlock()
		return queued, err
	}
	s.queue = append(s.queue, id)
	s.pending[id] = append(s.pending[id], w)
	first := len(s.queue) == 1
	s.mu.Unlock()
	if first {
		select {
		case s.kick <- struct{}{}:
		default:
		}
	}
	return queued, nil
}

// stream returns the open stream, or opens one.
func (k *keeper) stream(ctx context.Context) (*kaStream, error) {
	if s := k.current(); s != nil {
		return s, nil
	}
	select {
	case k.open <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-k.open }()
	if s := k.current(); s != nil { // another caller opened it meanwhile
		return s, nil
	}
	// The stream lives as long as the client, not as the caller's ctx;
	// ctx only bounds its creation. A stream that requires a leader ends
	// when the member loses its leader, as the lessor's does.
	sctx, cancel := context.WithCancel(clientv3.WithRequireLeader(k.cli.Ctx()))
	stop := context.AfterFunc(ctx, cancel)
	st, err := pb.NewLeaseClient(k.cli.ActiveConnection()).LeaseKeepAlive(sctx)
	if !stop() {
		cancel()
		return nil, ctx.Err()
	}
	if err != nil {
		cancel()
		return nil, err
	}
	s := &kaStream{stream: st, cancel: cancel, kick: make(chan struct{}, 1), done: make(chan struct{}),
		pending: map[int64][]*kaWaiter{}, lastRecv: time.Now()}
	go s.send()
	go s.recv(k)
	k.mu.Lock()
	k.cur = s
	k.mu.Unlock()
	return s, nil
}

func (k *keeper) current() *kaStream {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.cur
}

// resetIfStuck is called when a renewal's caller gave up (its waiter is
// marked answered, and a late answer is dropped; the request stays on the
// stream, so that the answers to the lease's later renewals are still told
// apart). When the stream has answered nothing since the request was
// queued, it is taken for stuck and reset.
func (k *keeper) resetIfStuck(s *kaStream, queued time.Time) {
	s.mu.Lock()
	stuck := s.lastRecv.Before(queued)
	s.mu.Unlock()
	if stuck {
		s.fail(k, fmt.Errorf("keep-alive stream: no answer since %v", time.Since(queued).Round(time.Millisecond)))
	}
}

// close ends the current stream (the client's closing ends it too).
func (k *keeper) close() {
	if s := k.current(); s != nil {
		s.fail(k, context.Canceled)
	}
}

// send writes the queued requests. gRPC writes the messages queued while
// its writer is busy in one system call; under load (many leases, the
// last batch less than busyGap ago) the sender also waits batchWait for
// more requests before it writes, so that a renewal costs a fraction of a
// write instead of one (a renewal's send time is taken before it is
// queued, so the wait only adds to its latency, never to its safe-until).
// A lone renewal is written at once.
func (s *kaStream) send() {
	var (
		last  time.Time
		batch []int64
		t     = time.NewTimer(time.Hour)
	)
	t.Stop()
	for {
		select {
		case <-s.kick:
		case <-s.done:
			return
		}
		if time.Since(last) < busyGap {
			t.Reset(batchWait)
			select {
			case <-t.C:
			case <-s.done:
				t.Stop()
				return
			}
		}
		s.mu.Lock()
		batch, s.queue = s.queue, batch[:0]
		s.mu.Unlock()
		if len(batch) == 0 {
			continue
		}
		last = time.Now()
		for _, id := range batch {
			if err := s.stream.Send(&pb.LeaseKeepAliveRequest{ID: id}); err != nil {
				// recv sees the stream's end and fails the waiting renewals.
				s.cancel()
				return
			}
		}
	}
}

// Batching of keep-alive requests under load (see send).
const (
	busyGap   = 20 * time.Millisecond
	batchWait = 10 * time.Millisecond
)

func (s *kaStream) recv(k *keeper) {
	for {
		resp, err := s.stream.Recv()
		if err != nil {
			s.fail(k, err)
			return
		}
		s.mu.Lock()
		s.lastRecv = time.Now()
		q := s.pending[resp.ID]
		var w *kaWaiter
		if len(q) > 0 {
			w = q[0]
			if len(q) == 1 {
				delete(s.pending, resp.ID)
			} else {
				q[0] = nil
				s.pending[resp.ID] = q[1:]
			}
		}
		s.mu.Unlock()
		if w != nil {
			w.fire(resp.TTL, nil)
		}
	}
}

// fail ends the stream with err: every waiting renewal gets err, and the
// keeper forgets the stream so that the next renewal opens a new one.
func (s *kaStream) fail(k *keeper, err error) {
	k.mu.Lock()
	if k.cur == s {
		k.cur = nil
	}
	k.mu.Unlock()
	s.mu.Lock()
	if s.err != nil {
		s.mu.Unlock()
		return
	}
	s.err = err
	pending := s.pending
	s.pending = nil
	s.queue = nil
	close(s.done)
	s.mu.Unlock()
	s.cancel()
	for _, q := range pending {
		for _, w := range q {
			w.fire(0, err)
		}
	}
}
