// Package etcd is fence's etcd backend: a coord.Coordinator on an etcd v3
// cluster, through go.etcd.io/etcd/client/v3.
//
// # Layout
//
// Every lease on lock NAME is an etcd lease with one key attached:
//
//	<prefix>locks/<url.PathEscape(NAME)>/<lease id, hex>
//
// whose value is JSON metadata: the holder, the requested TTL and, once the
// lease holds the lock, acquired_at (a waiter's key has queued_at instead).
// PathEscape escapes "/" (and "%"), so an escaped name never contains "/" and
// every key of a lock lies in the range "<prefix>locks/<escaped name>/":
// no lock's range contains another's ("a" never waits behind "a/b").
// Escaping works byte by byte, so the keys of every name starting with P
// start with "<prefix>locks/<escaped P>", which List and Watch use.
//
// # Locking
//
// The holder of a lock is its key with the smallest create revision; the
// others are waiters, served in create-revision order (first come, first
// served). Acquire grants a lease (the TTL rounded up to whole seconds; the
// cluster may grant more, and the lease carries what it granted), then puts
// its key in one transaction that also tells whether the lock was free (a
// no-wait attempt on a held lock writes nothing; see attempt.put); a waiter
// waits as concurrency.Mutex does (waiter.wait). The fencing token is the create
// revision of the holder's key: etcd revisions only go up, across restarts
// too, so tokens are strictly increasing per lock (and across locks) and
// never reused.
//
// Renew is one keep-alive on a stream all the coordinator's leases share
// (keeper; a lease it did not put is checked with a read first: leases).
// Release and Revoke revoke the lease, which deletes its key in the same
// step. Every read is linearizable.
//
// # Access
//
// With etcd authentication on, the user needs read-write permission on the
// key range of the prefix (etcdctl role grant-permission --prefix=true ROLE
// readwrite /fence/). A refused login or permission is one error line
// wrapping coord.ErrUnavailable, at once: it is not retried.
//
// Only client/v3 and api/v3 are imported: the etcd server is never linked
// into programs that use this package.
package etcd

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fence-dev/fence/pkg/coord"
)

// defaultPrefix is the key prefix used without WithPrefix.
const defaultPrefix = "/fence/"

// NormalPrefix is the key prefix that prefix stands for: "/fence/" when
// it is empty, else prefix ending in "/" ("/fence" is "/fence/"). Two
// spellings of one prefix are then one namespace: without it "/fence" put
// lock keys at "/fencelocks/..." beside "/fence/locks/...", and two hosts
// whose configurations differed by a slash held one lock at once. New and
// the guard and history stores on etcd apply it to the prefix they are
// given.
func NormalPrefix(prefix string) string {
	if prefix == "" {
		return defaultPrefix
	}
	if !strings.HasSuffix(prefix, "/") {
		prefix += "/"
	}
	return prefix
}

// defaultDialTimeout is used when no WithDialTimeout is given.
const defaultDialTimeout = 5 * time.Second

// gRPC keepalive of every connection (see New).
const (
	dialKeepAliveTime    = 10 * time.Second
	dialKeepAliveTimeout = 2 * time.Second
)

// cleanupTimeout bounds the requests that undo a failed Acquire (revoking
// its lease) after the caller's context has ended.
const cleanupTimeout = 5 * time.Second

// Option sets up a coordinator (New, NewFromClient), as
// concurrency.NewSession(cli, concurrency.WithTTL(n)) does a session.
type Option func(*options)

type options struct {
	prefix             string
	dialTimeout        time.Duration
	tls                *tls.Config
	username, password string
}

// WithPrefix puts prefix before every key, ending in "/" (one is added
// when it does not: see NormalPrefix). Without it keys go under
// "/fence/".
func WithPrefix(prefix string) Option { return func(o *options) { o.prefix = prefix } }

// WithDialTimeout bounds New's connection check and login
// (5 s without it). NewFromClient ignores it: its ctx
// bounds its check.
func WithDialTimeout(d time.Duration) Option { return func(o *options) { o.dialTimeout = d } }

// WithTLS has New use cfg for every connection. NewFromClient ignores it:
// the client has its own.
func WithTLS(cfg *tls.Config) Option { return func(o *options) { o.tls = cfg } }

// WithAuth has New log in as username with password. NewFromClient
// ignores it: the client has its own.
func WithAuth(username, password string) Option {
	return func(o *options) { o.username, o.password = username, password }
}

func optionsOf(opts []Option) options {
	var o options
	for _, f := range opts {
		f(&o)
	}
	o.prefix = NormalPrefix(o.prefix)
	if o.dialTimeout <= 0 {
		o.dialTimeout = defaultDialTimeout
	}
	return o
}

// coordinator is a coord.Coordinator on an etcd cluster (New,
// NewFromClient). It is safe for concurrent use.
type coordinator struct {
	cli    *clientv3.Client
	prefix string
	user   string
	where  string // "host:port,host:port" for messages
	closed atomic.Bool
	owned  bool // the client is the coordinator's own: Close closes it
	// ctx ends when the coordinator is closed (or its client is): the
	// waits and watches that Close must end are bound to it.
	ctx    context.Context
	stop   context.CancelFunc
	ka     *keeper
	leases leases
	// endLife cancels the client's context (after Close).
	endLife context.CancelFunc
	health  *health // see hedge.go
}

// New connects to the cluster at endpoints (client URLs such as
// "https://10.0.0.1:2379", or host:port pairs) and checks, with a real
// request, that it answers and that the user may read the prefix. It fails
// within the dial timeout (or when ctx ends) with an error wrapping
// coord.ErrUnavailable; a refused login or a missing permission says so.
func New(ctx context.Context, endpoints []string, opts ...Option) (coord.Coordinator, error) {
	if len(endpoints) == 0 {
		return nil, fmt.Errorf("%w: etcd: no endpoints", coord.ErrInvalid)
	}
	cfg := optionsOf(opts)
	c := &coordinator{prefix: cfg.prefix, user: cfg.username, where: hosts(endpoints), owned: true, health: newHealth()}
	if cfg.username != "" && cfg.password == "" {
		return nil, fmt.Errorf("%w: etcd: user %q has no password", coord.ErrInvalid, cfg.username)
	}
	// The client's own context (its login in clientv3.New is bounded by it
	// and the dial timeout) and the connection check's: a refusal by every
	// endpoint ends both at once.
	life, endLife := context.WithCancel(context.Background())
	pctx, cancel := context.WithTimeout(ctx, cfg.dialTimeout)
	defer cancel()
	rw := newRefusalWatch(endpoints, c.where, func() { endLife(); cancel() })
	// ctx bounds the login too, until New returns.
	detach := context.AfterFunc(ctx, endLife)
	fail := func(err error) (coord.Coordinator, error) {
		detach()
		rw.end()
		endLife()
		if rw.err != nil {
			return nil, rw.err
		}
		return nil, c.connectErr(ctx, cfg.dialTimeout, err)
	}
	ccfg := clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: cfg.dialTimeout,
		TLS:         cfg.tls,
		Username:    cfg.username,
		Password:    cfg.password,
		Logger:      zap.NewNop(),
		// A connection that hears nothing (a frozen or partitioned
		// member: the TCP connection stays open) is pinged and closed
		// when the ping is not answered, so that its streams end and
		// are opened again elsewhere. gRPC pings no more often than
		// every 10 s; etcd refuses pings more often than every 5 s.
		DialKeepAliveTime:    dialKeepAliveTime,
		DialKeepAliveTimeout: dialKeepAliveTimeout,
		Context:              life,
	}
	// The keeper's lanes dial each member with ccfg; the coordinator's own
	// client reports refusals (dial.go) and hedges and bounds its requests
	// (hedge.go).
	mcfg := ccfg
	mcfg.DialOptions = append(slices.Clip(ccfg.DialOptions),
		grpc.WithChainUnaryInterceptor(rw.interceptor, c.interceptUnary))
	cli, err := clientv3.New(mcfg)
	if err != nil {
		return fail(err)
	}
	// The client dials lazily: ask something to know the cluster answers.
	c.start(cli, ccfg)
	err = c.ping(pctx)
	rw.end()
	if err != nil || !detach() || rw.err != nil { // also: ctx ended, or refused, just as the answer came
		// What start made: the lanes' clients (hedged requests dial them), the client.
		c.ka.close()
		c.stop()
		cli.Close()
		if err == nil {
			err = ctx.Err()
		}
		return fail(err)
	}
	c.endLife = endLife
	return c, nil
}

// NewFromClient returns a coordinator that uses cli, an etcd client the
// caller made and keeps (as concurrency.NewSession takes one): its
// endpoints, TLS, credentials, logger and dial options are the client's.
// Of the options only WithPrefix applies. Like New, it checks with one
// request, within ctx, that the cluster answers and that the client may
// read the prefix. Close stops the coordinator's keep-alives and watches
// but does not close cli.
func NewFromClient(ctx context.Context, cli *clientv3.Client, opts ...Option) (coord.Coordinator, error) {
	if cli == nil {
		return nil, fmt.Errorf("%w: etcd: no client", coord.ErrInvalid)
	}
	c := &coordinator{prefix: optionsOf(opts).prefix, user: cli.Username, where: hosts(cli.Endpoints()), health: newHealth()}
	c.start(cli, clientv3.Config{}) // one lane: the caller's client (no hedging across members)
	if err := c.ping(ctx); err != nil {
		c.Close()
		if ctx.Err() != nil {
			return nil, fmt.Errorf("etcd %s: %w", c.where, ctx.Err())
		}
		return nil, c.mapErr(ctx, "connect", err)
	}
	return c, nil
}

// start sets c up on cli.
func (c *coordinator) start(cli *clientv3.Client, cfg clientv3.Config) {
	c.cli = cli
	c.ctx, c.stop = context.WithCancel(cli.Ctx())
	c.ka = newKeeper(cli, cfg, c.health)
}

// bound returns a context that ends with ctx or when c is closed, for the
// goroutines of a watch; what it registers goes when it ends.
func (c *coordinator) bound(ctx context.Context) context.Context {
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(c.ctx, cancel)
	context.AfterFunc(ctx, func() { stop() })
	return ctx
}

// pause waits d, and reports false when ctx ended first (or before).
func pause(ctx context.Context, d time.Duration) bool {
	if ctx.Err() != nil {
		return false
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// ping asks the cluster one cheap question that needs read access to the
// prefix.
func (c *coordinator) ping(ctx context.Context) error {
	_, err := c.cli.Get(ctx, c.locksKey(""), clientv3.WithPrefix(), clientv3.WithCountOnly())
	return err
}

// connectErr explains a failed connection check.
func (c *coordinator) connectErr(ctx context.Context, timeout time.Duration, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("etcd %s: %w", c.where, ctx.Err())
	}
	if isTimeout(err) {
		return fmt.Errorf("%w: etcd %s did not answer within %v", coord.ErrUnavailable, c.where, timeout)
	}
	return c.mapErr(ctx, "connect", err)
}

// Client returns the coordinator's etcd client, for packages that keep
// their own keys next to the locks (guards). Close closes it when New made
// it, not when it was given to NewFromClient.
func (c *coordinator) Client() *clientv3.Client { return c.cli }

// Prefix returns the key prefix in use ("/fence/" by default).
func (c *coordinator) Prefix() string { return c.prefix }

// Describe returns "etcd HOST:PORT,...".
func (c *coordinator) Describe() string { return "etcd " + c.where }

// Close closes the client (unless it came from NewFromClient). Leases stay
// until they are released or expire; waiting Acquire calls fail with an error wrapping
// coord.ErrUnavailable and Watch channels are closed.
func (c *coordinator) Close() error {
	if !c.closed.CompareAndSwap(false, true) {
		return nil
	}
	c.ka.close()
	c.stop()
	if !c.owned {
		return nil
	}
	err := c.cli.Close()
	if c.endLife != nil {
		c.endLife()
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("etcd %s: close: %v", c.where, err)
	}
	return nil
}

// errClosed is returned by calls on a closed coordinator.
var errClosed = fmt.Errorf("%w: etcd coordinator is closed", coord.ErrUnavailable)

// check fails calls on a closed coordinator at once (a closed client would
// retry for seconds before it gave up).
func (c *coordinator) check() error {
	if c.closed.Load() {
		return errClosed
	}
	return nil
}

// mapErr turns a client error into the coord error a caller can act on:
// the caller's context error as is, refused credentials and permissions
// as one clear line wrapping coord.ErrUnavailable, anything else as
// ErrUnavailable with the cluster's address.
func (c *coordinator) mapErr(ctx context.Context, op string, err error) error {
	if err == nil {
		return nil
	}
	if c.closed.Load() {
		return errClosed
	}
	if ctx.Err() != nil && (isTimeout(err) || errors.Is(err, context.Canceled) || status.Code(err) == codes.Canceled) {
		return fmt.Errorf("etcd %s: %w", op, ctx.Err())
	}
	switch {
	case errors.Is(err, rpctypes.ErrPermissionDenied):
		who := "anonymous access"
		if c.user != "" {
			who = fmt.Sprintf("user %q", c.user)
		}
		return fmt.Errorf("%w: etcd %s: permission denied: %s may not use keys under %q (grant it read-write on that prefix)",
			coord.ErrUnavailable, c.where, who, c.prefix)
	case errors.Is(err, rpctypes.ErrAuthFailed):
		return fmt.Errorf("%w: etcd %s: authentication failed: wrong user name or password", coord.ErrUnavailable, c.where)
	case errors.Is(err, rpctypes.ErrUserEmpty):
		return fmt.Errorf("%w: etcd %s requires authentication: set a user and a password", coord.ErrUnavailable, c.where)
	case errors.Is(err, rpctypes.ErrInvalidAuthToken), errors.Is(err, rpctypes.ErrInvalidAuthMgmt),
		errors.Is(err, rpctypes.ErrAuthOldRevision), errors.Is(err, rpctypes.ErrUserNotFound):
		return fmt.Errorf("%w: etcd %s: authentication: %v", coord.ErrUnavailable, c.where, err)
	}
	return fmt.Errorf("%w: etcd %s: %s: %s", coord.ErrUnavailable, c.where, op, oneLine(err))
}

func isTimeout(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || status.Code(err) == codes.DeadlineExceeded
}

// oneLine keeps an error message on one line.
func oneLine(err error) string {
	return strings.Join(strings.Fields(err.Error()), " ")
}

// hosts lists the endpoints' host:port, without schemes.
func hosts(endpoints []string) string {
	hs := make([]string, len(endpoints))
	for i, ep := range endpoints {
		hs[i] = ep
		if u, err := url.Parse(ep); err == nil && u.Host != "" {
			hs[i] = u.Host
		}
	}
	return strings.Join(hs, ",")
}
