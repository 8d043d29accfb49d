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
// no answer within hedgeAfter is sent again to every member, through the
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

func (c *coordinator) interceptUnary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn,
	invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	h := c.health
	_, persists := ctx.Value(persistKey{}).(bool)
	silent := h.silent() && !persists
	_, single := ctx.Value(onceKey{}).(bool)
	multi := hedgeable(method) && !single && c.ka != nil && c.ka.multi()
	if !multi && !silent {
		err := invoker(ctx, method, req, reply, cc, opts...)
		if answered(err) {
			h.answer()
		}
		return err
	}
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	hc := &hedgedCall{c: c, ctx: ctx, actx: actx, method: method, req: req, typ: reflect.TypeOf(reply).Elem(), multi: multi,
		// No copy gets the options that write into the caller's variables
		// (the client's grpc.Peer, read once this returns): a copy may
		// still run after its answer was not waited for.
		opts: hedgeOnly(opts)}
	lanes := 0
	if multi {
		lanes = len(c.ka.lanes)
	}
	hc.results = make(chan attemptResult, 1+lanes) // every copy can answer without a reader
	hc.launch(func(r any) error { return invoker(actx, method, req, r, cc, hc.opts...) })
	r := hc.wait(silent)
	if r.err == nil {
		reflect.ValueOf(reply).Elem().Set(reflect.ValueOf(r.reply).Elem())
	}
	return r.err
}

// hedgedCall is a unary request sent through the client and, when it is
// hedged, through every lane.
type hedgedCall struct {
	c              *coordinator
	ctx, actx      context.Context // the caller's; the copies' (ends when the call returns)
	method         string
	req            any
	typ            reflect.Type // of the reply
	opts           []grpc.CallOption
	multi, hedged  bool
	results        chan attemptResult
	launched, done int
	failedCmp      *attemptResult // a transaction whose compare failed, held for the others
}

func (hc *hedgedCall) launch(f func(r any) error) {
	hc.launched++
	go func() {
		r := reflect.New(hc.typ).Interface()
		hc.results <- attemptResult{r, f(r)}
	}()
}

// hedge sends the request through every lane, once.
func (hc *hedgedCall) hedge() {
	if hc.hedged || !hc.multi || hc.ctx.Err() != nil {
		return
	}
	hc.hedged = true
	for _, l := range hc.c.ka.lanes {
		hc.launch(func(r any) error {
			cli, err := l.client()
			if err != nil {
				return err
			}
			return cli.ActiveConnection().Invoke(hc.actx, hc.method, hc.req, r, hc.opts...)
		})
	}
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
// transaction whose compare failed), done of launched copies ended.
func afterResult(answered, failedCmp bool, done, launched int) resultStep {
	switch {
	case answered && failedCmp && done < launched:
		return resultHold
	case answered:
		return resultReturn
	case done < launched:
		return resultWait
	}
	return resultLast
}

// held is the answer to return when the call ends without a better one:
// the failed compare held, else err.
func (hc *hedgedCall) held(err error) attemptResult {
	if hc.failedCmp != nil {
		return *hc.failedCmp
	}
	return attemptResult{err: err}
}

// wait returns the answer of the call: the first copy's that a member
// answered (see health for silent).
func (hc *hedgedCall) wait(silent bool) attemptResult {
	h := hc.c.health
	start := h.now()
	if silent {
		hc.hedge()
	}
	hedgeT := time.NewTimer(hedgeAfter)
	defer hedgeT.Stop()
	boundT := time.NewTimer(answerBound)
	defer boundT.Stop()
	var giveUp <-chan time.Time
	if silent {
		t := time.NewTimer(silentBound)
		defer t.Stop()
		giveUp = t.C
	}
	holdT := time.NewTimer(time.Hour)
	holdT.Stop()
	defer holdT.Stop()
	for {
		select {
		case r := <-hc.results:
			if res, end := hc.onResult(r, holdT); end {
				return res
			}
		case <-holdT.C:
			return *hc.failedCmp
		case <-hedgeT.C:
			hc.hedge()
		case <-boundT.C:
			hc.hedge()
			h.noAnswerSince(start)
		case <-giveUp:
			return hc.held(errSilent(time.Duration(h.now() - h.answered.Load())))
		case <-hc.ctx.Done():
			return hc.held(status.FromContextError(hc.ctx.Err()).Err())
		}
	}
}

// onResult takes one copy's answer; end tells the call to return res.
func (hc *hedgedCall) onResult(r attemptResult, holdT *time.Timer) (res attemptResult, end bool) {
	hc.done++
	ok := answered(r.err)
	if ok {
		hc.c.health.answer()
	}
	tr, isTxn := r.reply.(*pb.TxnResponse)
	switch afterResult(ok, isTxn && r.err == nil && !tr.Succeeded, hc.done, hc.launched) {
	case resultReturn:
		return r, true
	case resultHold:
		if hc.failedCmp == nil {
			hc.failedCmp = &r
			holdT.Reset(hedgeAfter)
		}
		return r, false
	case resultWait:
		if !hc.hedged && hc.ctx.Err() == nil {
			hc.hedge() // the first copy failed at once (its member is gone): the others now
		}
		return r, false
	}
	return hc.held(r.err), true
}

// multi reports whether the keeper has a lane per member.
func (k *keeper) multi() bool { return len(k.lanes) > 1 }
