package etcd

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// keeper renews leases over LeaseKeepAlive streams that every lease of the
// coordinator shares, as etcd's own lessor does: a renewal is one small
// message on an open stream, not a new stream (KeepAliveOnce opens one per
// call, which costs a stream set-up on both sides).
//
// Unlike the lessor, a renewal here is a request and its answer: each
// request's send time is recorded before it is queued, and the caller gets
// the TTL that etcd granted in the answer to that request, with that
// request's send time. etcd answers the requests of one stream in order
// (its server reads a request, renews, answers, reads the next), so the
// answer to a lease's renewal is the first response for that lease after
// the request. Every safety bound fence computes (acknowledged send time +
// TTL) stays what it was with KeepAliveOnce.
//
// Hedging. With several endpoints the keeper has a lane per endpoint: a
// client of its own on that one member (made when first used) and at most
// one stream on it. Renewals go to the primary lane. A renewal that a
// stream has not answered within hedgeAfter is sent again on every other
// lane (every other member) at once, at most once per lane; the first
// answer wins and its lane becomes the primary, later answers are dropped.
// A member that is frozen, partitioned or waiting for a leader that is
// gone (a follower forwards every renewal to the leader and waits up to
// etcd's request timeout, about 5 s) then costs a renewal hedgeAfter, not
// the lease. A
// stream whose oldest unanswered request is stuckAfter old is ended: its
// renewals that wait on no other stream go to a lane they have not tried,
// or fail. gRPC keepalive (see New) ends a connection that is silent.
//
// A renewal is a waiter: a callback that the answer's receiver calls, which
// hands the answer to a blocked caller (renew). A renewal whose caller gives up resets every stream it
// waits on that answered nothing since it was queued there.
type keeper struct {
	lanes  []*lane
	health *health // told of every answer, and of renewals no member answered

	mu      sync.Mutex
	primary int
	closed  bool
}

// hedgeAfter and stuckAfter: see keeper. A keep-alive answered by a
// healthy member takes 1-3 ms on loopback and tens of ms across a busy
// network; one forwarded by a follower to a leader that is gone does not
// come back before etcd's request timeout (5 s + 2 election timeouts). The
// bounds are well above the first and far below the shortest renewal
// budget (TTL 3 s: a renewal at 1 s after the last acknowledged one, the
// stop signal at 2.1 s, so a renewal can go to all three members and be
// tried again on fresh streams before it).
var (
	hedgeAfter = 250 * time.Millisecond
	stuckAfter = time.Second
)

// lane is one member's stream of a keeper.
type lane struct {
	k   *keeper
	idx int
	cfg *clientv3.Config // nil: the coordinator's own client is used

	cliMu sync.Mutex // held while the lane's client is made
	cli   *clientv3.Client

	mu  sync.Mutex
	cur *kaStream

	lastSend atomic.Int64 // when a request was last queued on it (UnixNano; for tests)
}

// kaStream is one LeaseKeepAlive stream of a lane: opened on a goroutine of
// its own (requests queue meanwhile), its sender and its receiver.
type kaStream struct {
	lane   *lane
	ctx    context.Context
	cancel context.CancelFunc
	kick   chan struct{} // one slot: requests were queued
	done   chan struct{} // closed when the stream failed or was reset

	mu       sync.Mutex
	stream   pb.Lease_LeaseKeepAliveClient // nil until open
	queue    []*kaReq                      // not yet taken by the sender, in order
	out      []*kaReq                      // unanswered, in the order sent (queue included)
	err      error                         // why the stream ended, once done
	lastRecv time.Time                     // when the last response arrived
	timer    *time.Timer                   // the hedge check, when armed
}

// kaReq is one request of a renewal on one stream.
type kaReq struct {
	id     int64
	w      *kaWaiter
	queued time.Time
	hedged bool // looked at by the hedge check already
}

// kaWaiter is one renewal waiting for its answer. fire delivers the answer
// (ttl <= 0: the lease is not found) with the send time of the answered
// request, or an error, once.
type kaWaiter struct {
	id    int64
	first int64 // health.now() when it was made
	done  func(ttl int64, sent time.Time, err error)
	fired atomic.Bool

	mu      sync.Mutex
	tried   uint64 // the lanes it was sent on
	copies  int    // the streams it still waits on
	streams []*kaStream
	queued  []time.Time // when it was queued on each of streams
}

func (w *kaWaiter) fire(ttl int64, sent time.Time, err error) bool {
	if w.fired.CompareAndSwap(false, true) {
		w.done(ttl, sent, err)
		return true
	}
	return false
}

type kaResult struct {
	ttl  int64 // <= 0: the lease is not found
	sent time.Time
	err  error
}

// errKeeperClosed ends the streams of a closed keeper.
var errKeeperClosed = fmt.Errorf("keep-alive: %w", context.Canceled)

// newKeeper makes a keeper on cli. cfg is cli's configuration: with more
// than one endpoint, each lane dials its own member with it.
func newKeeper(cli *clientv3.Client, cfg clientv3.Config, h *health) *keeper {
	k := &keeper{health: h}
	if len(cfg.Endpoints) <= 1 {
		k.lanes = []*lane{{k: k, cli: cli}}
		return k
	}
	for i, ep := range cfg.Endpoints {
		c := cfg
		c.Endpoints = []string{ep}
		k.lanes = append(k.lanes, &lane{k: k, idx: i, cfg: &c})
	}
	// The processes of a cluster's users spread over its members.
	k.primary = rand.IntN(len(k.lanes))
	return k
}

// renew sends one keep-alive for id and returns the TTL etcd granted (0
// when the lease is gone) and the send time of the answered request, or
// the streams' or ctx's error.
func (k *keeper) renew(ctx context.Context, id clientv3.LeaseID) (int64, time.Time, error) {
	if err := ctx.Err(); err != nil {
		return 0, time.Time{}, err
	}
	ch := make(chan kaResult, 1)
	w := &kaWaiter{id: int64(id), first: k.health.now(), done: func(ttl int64, sent time.Time, err error) { ch <- kaResult{ttl, sent, err} }}
	k.send(w, k.primaryLane())
	select {
	case r := <-ch:
		return r.ttl, r.sent, r.err
	case <-ctx.Done():
		if w.fired.CompareAndSwap(false, true) {
			w.resetIfStuck()
		}
		return 0, time.Time{}, ctx.Err()
	}
}

func (k *keeper) primaryLane() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.primary
}

// send queues w's request on lane i (never blocking: the stream opens on a
// goroutine of its own). A lane whose stream has ended gets a new one; when
// the keeper is closed, w fails.
func (k *keeper) send(w *kaWaiter, i int) {
	l := k.lanes[i]
	for attempt := 0; attempt < 2; attempt++ {
		s := l.stream()
		if s == nil {
			w.fire(0, time.Time{}, errKeeperClosed)
			return
		}
		if s.enqueue(w) {
			return
		}
		// It ended in between: the next one.
	}
	w.fire(0, time.Time{}, errKeeperClosed)
}

// hedge sends w again on every lane it has not tried, and reports whether
// there was one. All at once, not one lane after another: while a leader
// is being elected each member may hold a renewal for a while (a follower
// forwards it to a leader that is gone, or waits an election timeout for
// one), and the one member that can answer must not be the last tried.
func (k *keeper) hedge(w *kaWaiter, i int) bool {
	n := len(k.lanes)
	w.mu.Lock()
	var next []int
	for d := 1; d < n; d++ {
		if j := (i + d) % n; w.tried&(1<<j) == 0 {
			next = append(next, j)
		}
	}
	w.mu.Unlock()
	if len(next) == 0 || w.fired.Load() {
		return false
	}
	k.mu.Lock()
	closed := k.closed
	k.mu.Unlock()
	if closed {
		return false
	}
	for _, j := range next {
		k.send(w, j)
	}
	return true
}

// stream returns the lane's stream, making one when it has none (nil when
// the keeper is closed).
func (l *lane) stream() *kaStream {
	l.k.mu.Lock()
	closed := l.k.closed
	l.k.mu.Unlock()
	if closed {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if s := l.cur; s != nil {
		return s
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &kaStream{lane: l, ctx: ctx, cancel: cancel, kick: make(chan struct{}, 1), done: make(chan struct{}),
		lastRecv: time.Now()}
	l.cur = s
	go s.open()
	return s
}

// client is the lane's etcd client (made on first use).
func (l *lane) client() (*clientv3.Client, error) {
	l.cliMu.Lock()
	defer l.cliMu.Unlock()
	if l.cli != nil {
		return l.cli, nil
	}
	cli, err := clientv3.New(*l.cfg)
	if err != nil {
		return nil, err
	}
	l.k.mu.Lock()
	closed := l.k.closed
	l.k.mu.Unlock()
	if closed {
		cli.Close()
		return nil, errKeeperClosed
	}
	l.cli = cli
	return cli, nil
}

// open opens the stream and runs its sender; its receiver runs on a
// goroutine of its own. The stream lives as long as its lane's client, or
// until it is reset. A stream that requires a leader ends when the member
// loses its leader, as the lessor's does.
func (s *kaStream) open() {
	cli, err := s.lane.client()
	if err != nil {
		s.fail(err)
		return
	}
	stop := context.AfterFunc(cli.Ctx(), s.cancel)
	defer stop()
	st, err := pb.NewLeaseClient(cli.ActiveConnection()).LeaseKeepAlive(clientv3.WithRequireLeader(s.ctx))
	if err != nil {
		s.fail(err)
		return
	}
	s.mu.Lock()
	if s.err != nil {
		s.mu.Unlock()
		return
	}
	s.stream = st
	s.mu.Unlock()
	go s.recv()
	s.send()
}

// enqueue queues a request for w, and reports false when the stream has
// ended.
func (s *kaStream) enqueue(w *kaWaiter) bool {
	r := &kaReq{id: w.id, w: w, queued: time.Now()}
	s.lane.lastSend.Store(r.queued.UnixNano())
	// The request is queued and recorded as unanswered under one lock, so
	// that the order of out is the order of the requests on the stream,
	// hence of the answers.
	s.mu.Lock()
	if s.err != nil {
		s.mu.Unlock()
		return false
	}
	w.mu.Lock()
	w.tried |= 1 << s.lane.idx
	w.copies++
	w.streams = append(w.streams, s)
	w.queued = append(w.queued, r.queued)
	w.mu.Unlock()
	s.queue = append(s.queue, r)
	s.out = append(s.out, r)
	first := len(s.queue) == 1
	if s.timer == nil && len(s.lane.k.lanes) > 1 {
		s.timer = time.AfterFunc(hedgeAfter, s.check)
	}
	s.mu.Unlock()
	if first {
		select {
		case s.kick <- struct{}{}:
		default:
		}
	}
	return true
}

// check is the hedge check: every request unanswered for hedgeAfter is
// sent again on the other lanes, the primary moves off a lane whose stream
// does not answer, and a stream whose oldest request has waited stuckAfter
// is ended.
func (s *kaStream) check() {
	now := time.Now()
	var late []*kaWaiter
	s.mu.Lock()
	s.timer = nil
	if s.err != nil {
		s.mu.Unlock()
		return
	}
	stuck := len(s.out) > 0 && now.Sub(s.out[0].queued) >= stuckAfter
	var why error
	if stuck {
		why = fmt.Errorf("keep-alive stream: no answer for %v", now.Sub(s.out[0].queued).Round(time.Millisecond))
	}
	next := time.Duration(-1)
	for _, r := range s.out {
		if r.w.fired.Load() {
			continue
		}
		if age := now.Sub(r.queued); !r.hedged && age >= hedgeAfter {
			r.hedged = true
			late = append(late, r.w)
		} else if !r.hedged && (next < 0 || hedgeAfter-age < next) {
			next = hedgeAfter - age
		}
	}
	if len(s.out) > 0 && !stuck {
		// Look again for the next request to hedge, or for the stream
		// being stuck.
		left := stuckAfter - now.Sub(s.out[0].queued)
		if next < 0 || left < next {
			next = left
		}
		s.timer = time.AfterFunc(max(next, time.Millisecond), s.check)
	}
	s.mu.Unlock()
	if len(late) > 0 {
		k := s.lane.k
		k.mu.Lock()
		if k.primary == s.lane.idx {
			k.primary = (s.lane.idx + 1) % len(k.lanes)
		}
		k.mu.Unlock()
		for _, w := range late {
			k.hedge(w, s.lane.idx)
		}
	}
	if stuck {
		s.fail(why)
	}
}

// resetIfStuck is called when a renewal's caller gave up (its waiter is
// marked answered, and a late answer is dropped; the requests stay on their
// streams, so that the answers to the lease's later renewals are still told
// apart). Each stream that has answered nothing since the request was
// queued on it is taken for stuck and reset.
func (w *kaWaiter) resetIfStuck() {
	w.mu.Lock()
	streams, queued := w.streams, w.queued
	w.mu.Unlock()
	if len(streams) > 0 {
		// Given up on with no answer from any member meanwhile: silent.
		streams[0].lane.k.health.noAnswerSince(w.first)
	}
	for i, s := range streams {
		s.mu.Lock()
		stuck := s.lastRecv.Before(queued[i])
		s.mu.Unlock()
		if stuck {
			s.fail(fmt.Errorf("keep-alive stream: no answer since %v", time.Since(queued[i]).Round(time.Millisecond)))
		}
	}
}

// close ends every stream, fails the renewals waiting, and closes the
// lanes' own clients.
func (k *keeper) close() {
	k.mu.Lock()
	k.closed = true
	k.mu.Unlock()
	for _, l := range k.lanes {
		l.mu.Lock()
		s := l.cur
		l.mu.Unlock()
		if s != nil {
			s.fail(errKeeperClosed)
		}
		if l.cfg != nil {
			l.cliMu.Lock()
			if l.cli != nil {
				l.cli.Close()
			}
			l.cliMu.Unlock()
		}
	}
}

// send writes the queued requests (gRPC writes the messages queued while
// its writer is busy in one system call).
func (s *kaStream) send() {
	var batch []*kaReq
	for {
		s.mu.Lock()
		pending := len(s.queue) > 0
		s.mu.Unlock()
		if !pending {
			select {
			case <-s.kick:
			case <-s.done:
				return
			}
		}
		s.mu.Lock()
		batch, s.queue = s.queue, batch[:0]
		s.mu.Unlock()
		for _, r := range batch {
			if err := s.stream.Send(&pb.LeaseKeepAliveRequest{ID: r.id}); err != nil {
				// recv sees the stream's end and fails the waiting renewals.
				s.cancel()
				return
			}
		}
		clear(batch)
	}
}

func (s *kaStream) recv() {
	for {
		resp, err := s.stream.Recv()
		if err != nil {
			s.fail(err)
			return
		}
		s.lane.k.health.answer()
		s.mu.Lock()
		s.lastRecv = time.Now()
		var r *kaReq
		for i, o := range s.out {
			if o.id == resp.ID {
				r = o
				s.out[i] = nil
				s.out = append(s.out[:i], s.out[i+1:]...)
				break
			}
		}
		s.mu.Unlock()
		if r == nil {
			continue
		}
		r.w.mu.Lock()
		r.w.copies--
		hedged := r.w.tried&^(1<<s.lane.idx) != 0
		r.w.mu.Unlock()
		if r.w.fire(resp.TTL, r.queued, nil) && hedged {
			// The first answer of a renewal sent on several lanes: this
			// lane is the one that answers.
			k := s.lane.k
			k.mu.Lock()
			k.primary = s.lane.idx
			k.mu.Unlock()
		}
	}
}

// fail ends the stream with err, and the lane forgets it so that the next
// renewal opens a new one. Each renewal that waited on it and on no other
// stream goes to a lane it has not tried, or gets err.
func (s *kaStream) fail(err error) {
	l := s.lane
	l.mu.Lock()
	if l.cur == s {
		l.cur = nil
	}
	l.mu.Unlock()
	s.mu.Lock()
	if s.err != nil {
		s.mu.Unlock()
		return
	}
	s.err = err
	out := s.out
	s.out, s.queue = nil, nil
	if s.timer != nil {
		s.timer.Stop()
		s.timer = nil
	}
	close(s.done)
	s.mu.Unlock()
	s.cancel()
	k := l.k
	k.mu.Lock()
	if k.primary == l.idx && len(k.lanes) > 1 {
		k.primary = (l.idx + 1) % len(k.lanes)
	}
	k.mu.Unlock()
	for _, r := range out {
		w := r.w
		w.mu.Lock()
		w.copies--
		last := w.copies == 0
		w.mu.Unlock()
		if !last || w.fired.Load() {
			continue
		}
		if !errors.Is(err, errKeeperClosed) && k.hedge(w, l.idx) {
			continue
		}
		if w.fire(0, time.Time{}, err) && !errors.Is(err, errKeeperClosed) {
			// Every member it was sent to failed it: silent, unless
			// something answered meanwhile.
			k.health.noAnswerSince(w.first)
		}
	}
}
