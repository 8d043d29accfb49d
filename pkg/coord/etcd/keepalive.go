package etcd

import (
	"context"
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
// the request. So acknowledged send time + TTL stays a lower bound of the
// expiry.
//
// Hedging. With several endpoints the keeper has a lane per endpoint: a
// client of its own on that one member (made when first used) and at most
// one stream on it. Renewals go to the primary lane. A renewal that has no
// answer within hedgeAfter, or whose lane failed it, is sent again on
// every other lane (every other member) at once, as the client's requests
// are (see health and hedgedWait); the first answer wins and its lane
// becomes the primary, later answers are dropped. A member that is frozen,
// partitioned or waiting for a leader that is gone (a follower forwards
// every renewal to the leader and waits up to etcd's request timeout,
// about 5 s) then costs a renewal hedgeAfter, not the lease. A renewal
// that has no answer within answerBound, or whose caller gives up, ends
// every stream it was sent on that has answered nothing since (the next
// renewal opens a new one); gRPC keepalive (see New) ends a connection
// that is silent.
type keeper struct {
	lanes  []*lane
	health *health // told of every answer, and of renewals no member answered

	primary atomic.Int64 // the lane renewals go to first
	closed  atomic.Bool
}

// hedgeAfter and answerBound: see keeper. A keep-alive answered by a
// healthy member takes 1-3 ms on loopback and tens of ms across a busy
// network; one forwarded by a follower to a leader that is gone does not
// come back before etcd's request timeout (5 s + 2 election timeouts). The
// bounds are well above the first and far below the shortest renewal
// budget (TTL 3 s: a renewal at 1 s after the last acknowledged one, the
// stop signal at 2.1 s, so a renewal can go to all three members and be
// tried again on fresh streams before it).
var hedgeAfter = 250 * time.Millisecond

// lane is one member's stream of a keeper.
type lane struct {
	k   *keeper
	cfg *clientv3.Config // nil: the coordinator's own client is used

	cliMu sync.Mutex // held while the lane's client is made
	cli   *clientv3.Client

	mu  sync.Mutex
	cur *kaStream

	lastSend atomic.Int64 // when a request was last queued on it (UnixNano; for tests)
}

// kaStream is one LeaseKeepAlive stream of a lane, opened by its first
// request; a goroutine receives its answers.
type kaStream struct {
	lane   *lane
	ctx    context.Context
	cancel context.CancelFunc

	mu       sync.Mutex // held while a request is sent, so out is in the order sent
	stream   pb.Lease_LeaseKeepAliveClient
	out      []*kaReq  // unanswered, in the order sent
	err      error     // why the stream ended
	lastRecv time.Time // when the last response arrived (zero: none yet)
}

// kaReq is one request of a renewal on one lane; its answer (a kaAnswer)
// or the error of its stream goes to res.
type kaReq struct {
	id     int64
	lane   int
	queued time.Time
	sent   time.Time                // set under on's mu
	on     atomic.Pointer[kaStream] // the stream it is sent on
	res    chan<- attemptResult
}

// kaAnswer is the answer to a kaReq.
type kaAnswer struct {
	ttl  int64 // <= 0: the lease is not found
	sent time.Time
	lane int
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
	for _, ep := range cfg.Endpoints {
		c := cfg
		c.Endpoints = []string{ep}
		k.lanes = append(k.lanes, &lane{k: k, cfg: &c})
	}
	// The processes of a cluster's users spread over its members.
	k.primary.Store(rand.Int64N(int64(len(k.lanes))))
	return k
}

// renew sends one keep-alive for id and returns the TTL etcd granted (0
// when the lease is gone) and the send time of the answered request, or
// the streams' or ctx's error, hedged as keeper says (hedgedWait).
func (k *keeper) renew(ctx context.Context, id clientv3.LeaseID) (int64, time.Time, error) {
	if err := ctx.Err(); err != nil {
		return 0, time.Time{}, err
	}
	first := k.health.now()
	n := len(k.lanes)
	res := make(chan attemptResult, n) // every lane answers at most once, reader or not
	var reqs []*kaReq
	p := int(k.primary.Load())
	send := func(i int) {
		r := &kaReq{id: int64(id), lane: i, queued: time.Now(), res: res}
		reqs = append(reqs, r)
		k.lanes[i].lastSend.Store(r.queued.UnixNano())
		go k.lanes[i].send(r)
	}
	// hedge sends the renewal on every other lane, all at once, not one
	// lane after another: while a leader is being elected each member may
	// hold a renewal for a while (a follower forwards it to a leader that
	// is gone, or waits an election timeout for one), and the one member
	// that can answer must not be the last tried.
	hedged := n == 1
	hedge := func() int {
		if hedged {
			return 0
		}
		hedged = true
		k.primary.CompareAndSwap(int64(p), int64((p+1)%n))
		for d := 1; d < n; d++ {
			send((p + d) % n)
		}
		return n - 1
	}
	send(p)
	r := hedgedWait(ctx, k.health, false, res, hedge, func() { k.resetStuck(reqs) })
	if r.err != nil {
		// Every member it was sent to failed it, or it was given up on:
		// silent, unless something answered meanwhile.
		k.health.noAnswerSince(first)
		k.resetStuck(reqs)
		return 0, time.Time{}, r.err
	}
	a := r.reply.(kaAnswer)
	if hedged {
		k.primary.Store(int64(a.lane)) // the lane that answers
	}
	return a.ttl, a.sent, nil
}

// resetStuck ends the stream each of a renewal's requests is on (or is
// opened for it) that has answered nothing since the request was queued.
// The renewal's requests stay on the streams that answer, so that the
// answers to the lease's later renewals are still told apart.
func (k *keeper) resetStuck(reqs []*kaReq) {
	for _, r := range reqs {
		s := r.on.Load()
		if s == nil {
			continue
		}
		s.mu.Lock()
		stuck := s.lastRecv.Before(r.queued)
		s.mu.Unlock()
		if stuck {
			s.fail(fmt.Errorf("keep-alive stream: no answer since %v", time.Since(r.queued).Round(time.Millisecond)))
		}
	}
}

// send sends r on the lane's stream, opening one when it has none; r gets
// the error when it cannot be sent.
func (l *lane) send(r *kaReq) {
	err := errKeeperClosed
	for range 2 { // a stream that ended meanwhile: the next one
		s := l.stream()
		if s == nil {
			break
		}
		r.on.Store(s)
		var queued bool
		if queued, err = s.send(r); queued {
			return // answered, or failed with the stream
		}
	}
	r.res <- attemptResult{err: err}
}

// stream returns the lane's stream, making one when it has none (nil when
// the keeper is closed).
func (l *lane) stream() *kaStream {
	if l.k.closed.Load() {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cur == nil {
		ctx, cancel := context.WithCancel(context.Background())
		l.cur = &kaStream{lane: l, ctx: ctx, cancel: cancel}
	}
	return l.cur
}

// send queues r on the stream and sends it (opening the stream first);
// queued is false when the stream had ended.
func (s *kaStream) send(r *kaReq) (queued bool, err error) {
	s.mu.Lock()
	if s.err == nil && s.stream == nil {
		s.err = s.open()
	}
	if err = s.err; err == nil {
		r.sent = time.Now()
		s.out = append(s.out, r)
		queued = true
		err = s.stream.Send(&pb.LeaseKeepAliveRequest{ID: r.id})
	}
	s.mu.Unlock()
	if err != nil {
		s.fail(err) // r, when queued, among the requests that get err
	}
	return queued, err
}

// open opens the stream and starts its receiver. The stream lives as long
// as its lane's client, or until it is reset. A stream that requires a
// leader ends when the member loses its leader, as the lessor's does.
func (s *kaStream) open() error {
	cli, err := s.lane.client()
	if err != nil {
		return err
	}
	stop := context.AfterFunc(cli.Ctx(), s.cancel)
	st, err := pb.NewLeaseClient(cli.ActiveConnection()).LeaseKeepAlive(clientv3.WithRequireLeader(s.ctx))
	if err != nil {
		stop()
		return err
	}
	s.stream = st
	go func() {
		defer stop()
		s.recv()
	}()
	return nil
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
	if l.k.closed.Load() {
		cli.Close()
		return nil, errKeeperClosed
	}
	l.cli = cli
	return cli, nil
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
				s.out = append(s.out[:i], s.out[i+1:]...)
				break
			}
		}
		s.mu.Unlock()
		if r != nil {
			r.res <- attemptResult{reply: kaAnswer{ttl: resp.TTL, sent: r.sent, lane: r.lane}}
		}
	}
}

// fail ends the stream with err (a request already failed with it is told
// by its sender), and the lane forgets it so that the next renewal opens a
// new one. Each request waiting on it gets err.
func (s *kaStream) fail(err error) {
	s.cancel() // first: an open in progress under s.mu ends
	l := s.lane
	l.mu.Lock()
	if l.cur == s {
		l.cur = nil
	}
	l.mu.Unlock()
	s.mu.Lock()
	if s.err == nil {
		s.err = err
	}
	out := s.out
	s.out = nil
	s.mu.Unlock()
	for _, r := range out {
		r.res <- attemptResult{err: err}
	}
}

// close ends every stream, fails the renewals waiting, and closes the
// lanes' own clients.
func (k *keeper) close() {
	k.closed.Store(true)
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
