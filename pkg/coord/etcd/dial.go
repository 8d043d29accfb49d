package etcd

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"

	"github.com/fence-dev/fence/pkg/coord"
)

// refusalWatch finds, while New checks a new client, that every endpoint
// refuses the connection, and then ends the check at once: the client would
// otherwise wait for its dial timeout and report "did not answer within 5s".
//
// It does not dial anything while the cluster answers. It watches the gRPC
// connection of the client (learnt from the first request through it, by
// an interceptor), and only when that connection is in TRANSIENT_FAILURE,
// meaning that no endpoint could be reached, it tries one TCP (or unix
// socket) connection to each endpoint. When every one is refused (or its
// host or socket does not exist), abort is called and err says why;
// any other outcome (a connection, a timeout, a TLS problem behind a port
// that answers) leaves the check to run its course.
type refusalWatch struct {
	endpoints []string
	where     string
	abort     func()

	once    sync.Once       // starts the watch, or (end) makes sure none starts
	ctx     context.Context // ends with the check
	cancel  context.CancelFunc
	stopped chan struct{}
	// err is why the check was aborted, or nil; it is read after end.
	err error
}

func newRefusalWatch(endpoints []string, where string, abort func()) *refusalWatch {
	ctx, cancel := context.WithCancel(context.Background())
	return &refusalWatch{endpoints: endpoints, where: where, abort: abort, ctx: ctx, cancel: cancel, stopped: make(chan struct{})}
}

// interceptor is a unary client interceptor that starts the watch on the
// connection of the first request.
func (w *refusalWatch) interceptor(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	w.once.Do(func() { go w.watch(cc) })
	return invoker(ctx, method, req, reply, cc, opts...)
}

func (w *refusalWatch) watch(cc *grpc.ClientConn) {
	defer close(w.stopped)
	ctx := w.ctx
	for {
		s := cc.GetState()
		switch s {
		case connectivity.Ready, connectivity.Shutdown:
			return
		case connectivity.TransientFailure:
			if err := probeRefused(ctx, w.endpoints); err != nil {
				w.err = fmt.Errorf("%w: etcd %s: %s", coord.ErrUnavailable, w.where, err)
				w.abort()
				return
			}
		}
		if !cc.WaitForStateChange(ctx, s) {
			return
		}
	}
}

// end stops the watch, and waits for it, once the check is over.
func (w *refusalWatch) end() {
	w.once.Do(func() { close(w.stopped) }) // no request went out: no watch
	w.cancel()
	<-w.stopped
}

// probeTimeout bounds each probe connection: a probe that does not end in
// time is not a refusal.
const probeTimeout = time.Second

// probeRefused tries one connection to each endpoint, at once, and returns
// why when every one was refused or names a host or socket that does not
// exist; nil when any connected or failed otherwise.
func probeRefused(ctx context.Context, endpoints []string) error {
	errs := make([]error, len(endpoints))
	var wg sync.WaitGroup
	for i, ep := range endpoints {
		wg.Go(func() {
			network, addr := dialTarget(ep)
			d := net.Dialer{Timeout: probeTimeout}
			conn, err := d.DialContext(ctx, network, addr)
			if err == nil {
				conn.Close()
			}
			errs[i] = err
		})
	}
	wg.Wait()
	var reasons []string
	refused := 0
	for i, err := range errs {
		var dnsErr *net.DNSError
		switch {
		case err == nil:
			return nil
		case errors.Is(err, syscall.ECONNREFUSED):
			refused++
			reasons = append(reasons, endpoints[i]+": connection refused")
		case errors.Is(err, syscall.ENOENT):
			reasons = append(reasons, endpoints[i]+": no such socket")
		case errors.As(err, &dnsErr) && dnsErr.IsNotFound:
			reasons = append(reasons, endpoints[i]+": no such host")
		default:
			return nil
		}
	}
	if refused == len(endpoints) {
		if len(endpoints) == 1 {
			return errors.New("connection refused")
		}
		return errors.New("connection refused by every endpoint")
	}
	if len(endpoints) == 1 {
		_, reason, _ := strings.Cut(reasons[0], ": ")
		return errors.New(reason)
	}
	return errors.New(strings.Join(reasons, "; "))
}

// dialTarget is the network and address the etcd client dials for an
// endpoint (as its internal/endpoint package translates them).
func dialTarget(ep string) (network, addr string) {
	for _, scheme := range []string{"unix://", "unixs://", "unix:", "unixs:"} {
		if p, ok := strings.CutPrefix(ep, scheme); ok {
			return "unix", p
		}
	}
	if strings.Contains(ep, "://") {
		if u, err := url.Parse(ep); err == nil {
			return "tcp", u.Host
		}
	}
	return "tcp", ep
}
