// Package etcdtest starts a real etcd server inside the test process, through
// go.etcd.io/etcd/server/v3/embed, for tests of fence's etcd backend and of
// everything built on it.
//
// Only test code may import this package: the embedded server must never be
// linked into the fence binary.
//
// A server listens on free loopback ports, keeps its data under t.TempDir(),
// logs nothing, and is stopped when the test ends:
//
//	srv := etcdtest.Start(t)
//	cli := srv.Client(t) // a clientv3.Client, closed at cleanup
//	srv.Restart(t)       // same data, same ports: revisions survive
package etcdtest

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"google.golang.org/grpc/grpclog"
)

func init() {
	// grpc logs errors (lost connections during Stop, refused TLS
	// handshakes) to stderr by default; tests want a quiet process.
	grpclog.SetLoggerV2(grpclog.NewLoggerV2(io.Discard, io.Discard, io.Discard))
}

// startTimeout bounds how long Start and Restart wait for the server.
const startTimeout = 30 * time.Second

// Option configures Start.
type Option func(*options)

type options struct {
	tls          bool
	auth         bool
	rootPassword string
}

// WithTLS serves clients over TLS with client-certificate authentication. A CA,
// a server certificate (for 127.0.0.1 and localhost) and a client certificate
// are generated for the test; Server.TLS returns their files.
func WithTLS() Option { return func(o *options) { o.tls = true } }

// WithAuth enables etcd authentication with a "root" user (role root) whose
// password is rootPassword. Server.Client then logs in as root.
func WithAuth(rootPassword string) Option {
	return func(o *options) { o.auth, o.rootPassword = true, rootPassword }
}

// Server is a running embedded etcd.
type Server struct {
	opts      options
	dir       string
	clientURL url.URL
	peerURL   url.URL
	certs     *certFiles

	mu   sync.Mutex
	etcd *embed.Etcd // nil when stopped
}

// Start starts an etcd server for the duration of the test. It fails the test
// when the server does not start.
func Start(t testing.TB, opts ...Option) *Server {
	t.Helper()
	s := &Server{dir: t.TempDir()}
	for _, o := range opts {
		o(&s.opts)
	}
	if s.opts.tls {
		c, err := writeCerts(t.TempDir())
		if err != nil {
			t.Fatalf("etcdtest: generating certificates: %v", err)
		}
		s.certs = c
	}
	scheme := "http"
	if s.opts.tls {
		scheme = "https"
	}
	// Free ports are found by binding port 0 and closing; another process
	// may take one in between, so try a few times.
	var err error
	for attempt := 0; attempt < 5; attempt++ {
		var cp, pp int
		if cp, pp, err = freePorts(); err != nil {
			continue
		}
		s.clientURL = url.URL{Scheme: scheme, Host: fmt.Sprintf("127.0.0.1:%d", cp)}
		s.peerURL = url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", pp)}
		if err = s.start(); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("etcdtest: starting etcd: %v", err)
	}
	t.Cleanup(s.Stop)
	if s.opts.auth {
		if err := s.enableAuth(); err != nil {
			t.Fatalf("etcdtest: enabling auth: %v", err)
		}
	}
	return s
}

func (s *Server) start() error {
	cfg := embed.NewConfig()
	cfg.Name = "etcdtest"
	cfg.Dir = s.dir
	cfg.TickMs = 10
	cfg.ElectionMs = 100
	cfg.Logger = "zap"
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	cfg.ListenClientUrls = []url.URL{s.clientURL}
	cfg.AdvertiseClientUrls = []url.URL{s.clientURL}
	cfg.ListenPeerUrls = []url.URL{s.peerURL}
	cfg.AdvertisePeerUrls = []url.URL{s.peerURL}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.EnableGRPCGateway = false
	cfg.BcryptCost = 4 // bcrypt.MinCost: auth tests need no strong hashing
	if s.certs != nil {
		cfg.ClientTLSInfo.CertFile = s.certs.serverCert
		cfg.ClientTLSInfo.KeyFile = s.certs.serverKey
		cfg.ClientTLSInfo.TrustedCAFile = s.certs.ca
		cfg.ClientTLSInfo.ClientCertAuth = true
	}
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return err
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return fmt.Errorf("etcd failed while starting: %v", err)
	case <-time.After(startTimeout):
		e.Server.Stop()
		e.Close()
		return errors.New("etcd did not become ready in time")
	}
	s.mu.Lock()
	s.etcd = e
	s.mu.Unlock()
	return nil
}

// Endpoints returns the client URLs ("http://127.0.0.1:PORT", or https with
// WithTLS). They stay the same across Restart.
func (s *Server) Endpoints() []string { return []string{s.clientURL.String()} }

// TLS returns the files of the CA certificate and of a client certificate and
// key the server accepts. They are empty without WithTLS.
func (s *Server) TLS() (caFile, certFile, keyFile string) {
	if s.certs == nil {
		return "", "", ""
	}
	return s.certs.ca, s.certs.clientCert, s.certs.clientKey
}

// ClientTLSConfig returns a tls.Config with the client certificate and the
// CA of WithTLS, or nil without it.
func (s *Server) ClientTLSConfig(t testing.TB) *tls.Config {
	t.Helper()
	if s.certs == nil {
		return nil
	}
	cfg, err := s.certs.clientConfig()
	if err != nil {
		t.Fatalf("etcdtest: %v", err)
	}
	return cfg
}

// Client returns a client of the server, logged in as root under WithAuth
// and using the client certificate under WithTLS. It is closed at cleanup.
func (s *Server) Client(t testing.TB) *clientv3.Client {
	t.Helper()
	cfg := clientv3.Config{
		Endpoints:   s.Endpoints(),
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
		TLS:         s.ClientTLSConfig(t),
	}
	if s.opts.auth {
		cfg.Username, cfg.Password = "root", s.opts.rootPassword
	}
	c, err := clientv3.New(cfg)
	if err != nil {
		t.Fatalf("etcdtest: client: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// Stop stops the server; its data stays for Restart. Stopping a stopped
// server does nothing. Clients with open streams (watches, keep-alives) make
// the stop wait up to the server's request timeout (about 5 s).
func (s *Server) Stop() {
	s.mu.Lock()
	e := s.etcd
	s.etcd = nil
	s.mu.Unlock()
	if e == nil {
		return
	}
	e.Close()
	<-e.Err() // closed once the server is over
}

// Restart stops the server if it runs and starts it again on the same data
// directory and the same ports: keys, revisions, leases and users survive.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.Stop()
	var err error
	deadline := time.Now().Add(startTimeout)
	for {
		// The ports were just released; retry briefly if the kernel has not
		// let go of them yet.
		if err = s.start(); err == nil || time.Now().After(deadline) ||
			!strings.Contains(err.Error(), "address already in use") {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("etcdtest: restarting etcd: %v", err)
	}
}

func (s *Server) enableAuth() error {
	cfg := clientv3.Config{
		Endpoints:   s.Endpoints(),
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	}
	if s.certs != nil {
		tc, err := s.certs.clientConfig()
		if err != nil {
			return err
		}
		cfg.TLS = tc
	}
	c, err := clientv3.New(cfg)
	if err != nil {
		return err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	if _, err := c.UserAdd(ctx, "root", s.opts.rootPassword); err != nil {
		return err
	}
	if _, err := c.UserGrantRole(ctx, "root", "root"); err != nil {
		return err
	}
	_, err = c.AuthEnable(ctx)
	return err
}

func freePorts() (int, int, error) {
	var ports [2]int
	var ls [2]net.Listener
	for i := range ls {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			for _, p := range ls[:i] {
				p.Close()
			}
			return 0, 0, err
		}
		ls[i] = l
		ports[i] = l.Addr().(*net.TCPAddr).Port
	}
	for _, l := range ls {
		l.Close()
	}
	return ports[0], ports[1], nil
}

// certFiles are the PEM files written by WithTLS.
type certFiles struct {
	ca, serverCert, serverKey, clientCert, clientKey string
}

func (c *certFiles) clientConfig() (*tls.Config, error) {
	pair, err := tls.LoadX509KeyPair(c.clientCert, c.clientKey)
	if err != nil {
		return nil, err
	}
	caPEM, err := os.ReadFile(c.ca)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, errors.New("no certificate in the CA file")
	}
	return &tls.Config{Certificates: []tls.Certificate{pair}, RootCAs: pool, MinVersion: tls.VersionTLS12}, nil
}
