package etcd

import (
	"context"
	"reflect"
	"sync/atomic"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Every unary request of the coordinator's client (its own, and those of
// the stores that share the client: history, guards) goes through
// interceptUnary, for two things the client does not do:
//
// Hedging. The client's balancer sends a request to one member; a member
// that is frozen or cut off keeps its TCP connection open, and gRPC
// keepalive (10 s at the least) is the first to notice. A request that has
// no answer within hedgeAfter, or whose first copy failed with no answer of
// a member, is sent again to every member, through the
// keeper's lanes (a connection per member), and the first answer wins: a
// release, the history record before it and the read that goes with it
// then cost a frozen member 250 ms, not the time until it resumes. Only
// requests that may be sent twice are hedged: reads, a revoke (the second
// finds the lease gone), puts, deletes and transactions (fence's guard
// their writes with a compare, so the second copy finds the first done; a
// copy that reports its compare failed waits for the others, so that it does
// not hide the one that succeeded). A grant is not: two would leak a lease;
// nor is a waiter's first transaction of Acquire (once).
//
// Silence. When no member has answered anything for answerBound while
// asked (renewals on every lane, or a hedged request), the cluster is
// taken to be silent (no quorum, or frozen) until anything answers again.
// A request made then is sent to every member at once and given
// silentBound, after which it fails (errSilent, coord.ErrUnavailable):
// what fence does after it stopped its command (history records, the
// release) ends within about a second, not when the quorum returns. A
// caller that must wait through a stall (a waiter, Acquire) marks its
// context with persist and is only hedged.
type health struct {
	base     time.Time
	answered atomic.Int64 // ns after base: the last answer of any member
	silentAt atomic.Int64 // ns after base: when found silent (0: never)
}

func newHealth() *health { return &health{base: time.Now()} }

func (h *health) now() int64 { return int64(time.Since(h.base)) }

// answer records that a member answered.
func (h *health) answer() {
	now := h.now()
	for {
		old := h.answered.Load()
		if old >= now || h.answered.CompareAndSwap(old, now) {
			return
		}
	}
}

// noAnswerSince marks the cluster silent when nothing answered since t
// (a reading of now).
func (h *health) noAnswerSince(t int64) {
	if h.answered.Load() < t {
		h.silentAt.Store(h.now())
	}
}

// silent reports whether the cluster was found silent and nothing has
// answered since.
func (h *health) silent() bool {
	s := h.silentAt.Load()
	return s != 0 && s > h.answered.Load()
}

var (
	answerBound = time.Second
	silentBound = 150 * time.Millisecond
)

type persistKey struct{}

type onceKey struct{}

// once marks ctx as a request's that must not be sent twice: a waiter's
// first transaction of Acquire, whose second copy would find the lock
// taken by the first and put its queued record over the holder's.
func once(ctx context.Context) context.Context { return context.WithValue(ctx, onceKey{}, true) }

// persist marks ctx as a caller's that waits through a silent cluster (see
// health): its requests are hedged but not cut short.
func persist(ctx context.Context) context.Context { return context.WithValue(ctx, persistKey{}, true) }

// errSilent is the error of a request cut short on a silent cluster.
func errSilent(d time.Duration) error {
	return status.Errorf(codes.Aborted, "no etcd member has answered for %v", d.Round(time.Millisecond))
}

// hedgeable tells which requests may be sent more than once.
func hedgeable(method string) bool {
	switch method {
	case "/etcdserverpb.KV/Range", "/etcdserverpb.KV/Txn", "/etcdserverpb.KV/Put", "/etcdserverpb.KV/DeleteRange",
		"/etcdserverpb.Lease/LeaseRevoke", "/etcdserverpb.Lease/LeaseTimeToLive", "/etcdserverpb.Lease/LeaseLeases":
		return true
	}
	return false
}

// answered tells an answer of a member (a result, or an error of etcd's
// own, such as a lease not found) from a request that did not get one.
func answered(err error) bool {
	switch status.Code(err) {
	case codes.OK, codes.InvalidArgument, codes.NotFound, codes.AlreadyExists, codes.PermissionDenied,
		codes.FailedPrecondition, codes.OutOfRange, codes.Unauthenticated, codes.ResourceExhausted:
		return true
	}
	return false
}

// hedgeOnly drops the call options that write into the caller's variables
// (a copy that runs on after the call returned must not race the caller).
func hedgeOnly(opts []grpc.CallOption) []grpc.CallOption {
	var out []grpc.CallOption
	for _, o := range opts {
		switch o.(type) {
		case grpc.PeerCallOption, grpc.HeaderCallOption, grpc.TrailerCallOption:
			continue
		}
		out = append(out, o)
	}
	return out
}

type attemptResult struct {
	reply any
	err   error
}

// resultStep is what an answer of one copy leads to.
type resultStep int

const (
	resultReturn resultStep = iota // return it
	resultHold                     // a failed compare: perhaps a copy succeeded first; wait for the others a little
	resultWait                     // no answer of a member: wait for the other copies
	resultLast                     // no answer, and no copy left: return what was held, or this error
)

// afterResult decides: answered (a member answered), failedCmp (a
// transaction whose compare failed), pending copies still out.
func afterResult(answered, failedCmp bool, pending int) resultStep {
	switch {
	case answered && failedCmp && pending > 0:
		return resultHold
	case answered:
		return resultReturn
	case pending > 0:
		return resultWait
	}
	return resultLast
}

// interceptUnary sends the request through the client and, when it is
// hedged, through every lane (see health); the first copy that a member
// answered wins.
func (c *coordinator) interceptUnary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn,
	invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	h := c.health
	_, persists := ctx.Value(persistKey{}).(bool)
	silent := h.silent() && !persists
	_, single := ctx.Value(onceKey{}).(bool)
	var lanes []*lane // not yet hedged to (nil: not hedged)
	if hedgeable(method) && !single && c.ka != nil && c.ka.multi() {
		lanes = c.ka.lanes
	}
	if lanes == nil && !silent {
		err := invoker(ctx, method, req, reply, cc, opts...)
		if answered(err) {
			h.answer()
		}
		return err
	}
	actx, cancel := context.WithCancel(ctx) // the copies' context: ends when the call returns
	defer cancel()
	// No copy gets the options that write into the caller's variables (the
	// client's grpc.Peer, read once this returns): a copy may still run
	// after its answer was not waited for.
	opts = hedgeOnly(opts)
	results := make(chan attemptResult, 1+len(lanes)) // every copy can answer without a reader
	launch := func(f func(r any) error) {
		go func() {
			r := reflect.New(reflect.TypeOf(reply).Elem()).Interface()
			results <- attemptResult{r, f(r)}
		}()
	}
	// hedge sends the request through every lane, once, and tells how
	// many copies it sent.
	hedge := func() int {
		if ctx.Err() != nil {
			return 0
		}
		n := len(lanes)
		for _, l := range lanes {
			launch(func(r any) error {
				cli, err := l.client()
				if err != nil {
					return err
				}
				return cli.ActiveConnection().Invoke(actx, method, req, r, opts...)
			})
		}
		lanes = nil
		return n
	}
	launch(func(r any) error { return invoker(actx, method, req, r, cc, opts...) })
	r := hedgedWait(ctx, h, silent, results, hedge, func() {})
	if r.err == nil {
		reflect.ValueOf(reply).Elem().Set(reflect.ValueOf(r.reply).Elem())
	}
	return r.err
}

// hedgedWait returns the answer of a call whose first copy was sent and
// whose copies answer on results: the first copy's that a member answered
// (see health for silent). It hedges (hedge sends the other copies, once,
// and tells how many) after hedgeAfter, or when a copy failed unanswered;
// after answerBound with no answer it calls stuck. Both a request of the
// client (interceptUnary) and a renewal (keeper.renew) are waited for so.
func hedgedWait(ctx context.Context, h *health, silent bool, results <-chan attemptResult, hedge func() int, stuck func()) attemptResult {
	start := h.now()
	pending := 1
	var giveUp <-chan time.Time
	if silent {
		pending += hedge()
		t := time.NewTimer(silentBound)
		defer t.Stop()
		giveUp = t.C
	}
	hedgeT := time.NewTimer(hedgeAfter)
	defer hedgeT.Stop()
	boundT := time.NewTimer(answerBound)
	defer boundT.Stop()
	var holdT <-chan time.Time
	var failedCmp *attemptResult // a transaction whose compare failed, held for the others
	held := func(err error) attemptResult {
		if failedCmp != nil {
			return *failedCmp
		}
		return attemptResult{err: err}
	}
	for {
		select {
		case r := <-results:
			pending--
			ok := answered(r.err)
			if ok {
				h.answer()
			} else {
				pending += hedge()
			}
			tr, isTxn := r.reply.(*pb.TxnResponse)
			switch afterResult(ok, isTxn && r.err == nil && !tr.Succeeded, pending) {
			case resultReturn:
				return r
			case resultHold:
				if failedCmp == nil {
					failedCmp = &r
					holdT = time.After(hedgeAfter)
				}
			case resultLast:
				return held(r.err)
			}
		case <-holdT:
			return *failedCmp
		case <-hedgeT.C:
			pending += hedge()
		case <-boundT.C:
			pending += hedge()
			h.noAnswerSince(start)
			stuck()
		case <-giveUp:
			return held(errSilent(time.Duration(h.now() - h.answered.Load())))
		case <-ctx.Done():
			return held(status.FromContextError(ctx.Err()).Err())
		}
	}
}

// multi reports whether the keeper has a lane per member.
func (k *keeper) multi() bool { return len(k.lanes) > 1 }
