package etcd

import (
	"context"
	"errors"
	"fmt"
	"sync"
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
// A stream that fails fails every renewal waiting on it, and the next
// renewal opens a new one. A renewal whose caller gives up while the stream
// has answered nothing since the request was sent resets the stream: a
// stream stuck on a dead connection must not hold every later renewal.
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
	sendq  chan int64
	done   chan struct{} // closed when the stream failed or was reset

	mu       sync.Mutex
	pending  map[int64][]chan kaResult
	err      error     // why the stream ended, once done
	lastRecv time.Time // when the last response arrived
}

type kaResult struct {
	ttl int64 // <= 0: the lease is not found
	err error
}

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
	// The request is queued and its answer awaited under one lock, so that
	// the order of the waiting callers of a lease is the order of their
	// requests on the stream, hence of the answers.
	ch := make(chan kaResult, 1)
	queued := time.Now()
	s.mu.Lock()
	if s.err != nil {
		s.mu.Unlock()
		return 0, s.err
	}
	select {
	case s.sendq <- int64(id):
	default:
		s.mu.Unlock()
		return 0, errQueueFull
	}
	s.pending[int64(id)] = append(s.pending[int64(id)], ch)
	s.mu.Unlock()
	select {
	case r := <-ch:
		return r.ttl, r.err
	case <-ctx.Done():
		k.giveUp(s, queued)
		return 0, ctx.Err()
	}
}

// errQueueFull: more renewals are waiting to be sent than the queue holds.
// The caller's renewal fails; its next one tries again.
var errQueueFull = errors.New("keep-alive queue full")

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
	s := &kaStream{stream: st, cancel: cancel, sendq: make(chan int64, 4096), done: make(chan struct{}),
		pending: map[int64][]chan kaResult{}, lastRecv: time.Now()}
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

// giveUp is a renewal's caller giving up. When the stream has answered
// nothing since the request was queued, it is taken for stuck and reset.
func (k *keeper) giveUp(s *kaStream, queued time.Time) {
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
// last batch less than busyGap ago) the sender also waits up to batchWait
// for more requests before it writes, so that a renewal costs a fraction of
// a write instead of one (a renewal's send time is taken before it is
// queued, so the wait only adds to its latency, never to its safe-until).
// A lone renewal is written at once.
func (s *kaStream) send() {
	var last time.Time
	batch := make([]int64, 0, 64)
	for {
		select {
		case id := <-s.sendq:
			batch = append(batch[:0], id)
		case <-s.done:
			return
		}
		if time.Since(last) < busyGap {
			t := time.NewTimer(batchWait)
		collect:
			for len(batch) < cap(batch) {
				select {
				case id := <-s.sendq:
					batch = append(batch, id)
				case <-t.C:
					break collect
				case <-s.done:
					t.Stop()
					return
				}
			}
			t.Stop()
		}
		for drained := false; !drained && len(batch) < cap(batch); {
			select {
			case id := <-s.sendq:
				batch = append(batch, id)
			default:
				drained = true
			}
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
		var ch chan kaResult
		if len(q) > 0 {
			ch = q[0]
			if len(q) == 1 {
				delete(s.pending, resp.ID)
			} else {
				s.pending[resp.ID] = q[1:]
			}
		}
		s.mu.Unlock()
		if ch != nil {
			ch <- kaResult{ttl: resp.TTL}
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
	close(s.done)
	s.mu.Unlock()
	s.cancel()
	for _, q := range pending {
		for _, ch := range q {
			ch <- kaResult{err: err}
		}
	}
}
