package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// etcdServer is Debian's etcd-server, started on free loopback ports: the
// one server that fence and etcdctl both talk to.
type etcdServer struct {
	cmd      *exec.Cmd
	endpoint string // http://127.0.0.1:PORT
	version  string
	done     chan struct{}
}

// etcdBinary is the etcd server binary (FENCE_ETCD_BIN overrides).
func etcdBinary() string {
	if b := os.Getenv("FENCE_ETCD_BIN"); b != "" {
		return b
	}
	return "/usr/bin/etcd"
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// startEtcd starts the server with its data in dataDir and waits until it
// answers. Its output goes to logPath.
func startEtcd(ctx context.Context, dataDir, logPath string) (*etcdServer, error) {
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		s, err := tryStartEtcd(ctx, dataDir, logPath)
		if err == nil {
			return s, nil
		}
		lastErr = err
	}
	return nil, lastErr
}

func tryStartEtcd(ctx context.Context, dataDir, logPath string) (*etcdServer, error) {
	cp, err := freePort()
	if err != nil {
		return nil, err
	}
	pp, err := freePort()
	if err != nil {
		return nil, err
	}
	cu, pu := fmt.Sprintf("http://127.0.0.1:%d", cp), fmt.Sprintf("http://127.0.0.1:%d", pp)
	logf, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return nil, err
	}
	s := &etcdServer{endpoint: cu, done: make(chan struct{})}
	s.cmd = exec.Command(etcdBinary(),
		"--name", "bench",
		"--data-dir", dataDir,
		"--listen-client-urls", cu, "--advertise-client-urls", cu,
		"--listen-peer-urls", pu, "--initial-advertise-peer-urls", pu,
		"--initial-cluster", "bench="+pu,
		"--log-level", "error")
	s.cmd.Stdout, s.cmd.Stderr = logf, logf
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", etcdBinary(), err)
	}
	go func() { s.cmd.Wait(); close(s.done) }()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{cu}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		s.stop()
		return nil, err
	}
	defer cli.Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case <-s.done:
			return nil, fmt.Errorf("etcd exited at start (see %s)", logPath)
		default:
		}
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		st, err := cli.Status(rctx, cu)
		cancel()
		if err == nil {
			s.version = st.Version
			return s, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			s.stop()
			return nil, fmt.Errorf("etcd at %s did not answer: %v (see %s)", cu, err, logPath)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// client returns a new client of the server.
func (s *etcdServer) client() (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{Endpoints: []string{s.endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
}

func (s *etcdServer) stop() {
	if s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(5 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
}
