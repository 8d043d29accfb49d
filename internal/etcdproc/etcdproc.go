// Package etcdproc runs Debian's etcd-server (/usr/bin/etcd) as a separate
// process for tests where a real, separate server process is the point: it
// can be frozen with SIGSTOP and resumed, or killed.
package etcdproc

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Server is a running etcd process.
type Server struct {
	cmd      *exec.Cmd
	endpoint string
}

// Binary is the etcd binary used, overridable by FENCE_ETCD_BIN.
func Binary() string {
	if b := os.Getenv("FENCE_ETCD_BIN"); b != "" {
		return b
	}
	if p, err := exec.LookPath("etcd"); err == nil {
		return p
	}
	return "/usr/bin/etcd"
}

// Start runs etcd on free loopback ports with a data dir under t.TempDir(),
// waits until it answers, and stops it at cleanup. Without the binary the
// test is skipped, unless FENCE_REQUIRE_ETCD_SERVER is set (CI), where it
// fails.
func Start(t testing.TB) *Server {
	t.Helper()
	bin := Binary()
	if _, err := os.Stat(bin); err != nil {
		if os.Getenv("FENCE_REQUIRE_ETCD_SERVER") != "" {
			t.Fatalf("etcd server binary %s: %v (install Debian's etcd-server)", bin, err)
		}
		t.Skipf("etcd server binary not found (%v); install Debian's etcd-server", err)
	}
	client, peer := freePort(t), freePort(t)
	s := &Server{endpoint: "127.0.0.1:" + client}
	cu, pu := "http://127.0.0.1:"+client, "http://127.0.0.1:"+peer
	s.cmd = exec.Command(bin,
		"--name", "fence-test",
		"--data-dir", t.TempDir(),
		"--listen-client-urls", cu, "--advertise-client-urls", cu,
		"--listen-peer-urls", pu, "--initial-advertise-peer-urls", pu,
		"--initial-cluster", "fence-test="+pu,
		"--heartbeat-interval", "10", "--election-timeout", "100",
		"--log-level", "error")
	s.cmd.Env = append(os.Environ(), "ETCD_UNSUPPORTED_ARCH="+archEnv())
	s.cmd.SysProcAttr = procAttr()
	var out strings.Builder
	s.cmd.Stdout, s.cmd.Stderr = &out, &out
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("start etcd: %v", err)
	}
	t.Cleanup(func() {
		s.cmd.Process.Signal(syscall.SIGCONT)
		s.cmd.Process.Kill()
		s.cmd.Wait()
	})
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{s.endpoint}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ctx, cancel := contextWithTimeout(time.Second)
		_, err := c.Get(ctx, "health")
		cancel()
		if err == nil {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("etcd did not answer: %v\n%s", err, out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Endpoints is the client URL list.
func (s *Server) Endpoints() []string { return []string{s.endpoint} }

// Addr is the client host:port.
func (s *Server) Addr() string { return s.endpoint }

// PID of the etcd process.
func (s *Server) PID() int { return s.cmd.Process.Pid }

// Freeze stops the server with SIGSTOP and returns once every one of its
// threads is stopped (the signal takes effect asynchronously).
func (s *Server) Freeze() error {
	if err := s.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		return err
	}
	task := fmt.Sprintf("/proc/%d/task", s.PID())
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if allStopped(task) {
			return nil
		}
	}
	return fmt.Errorf("etcd (pid %d) did not stop", s.PID())
}

func allStopped(taskDir string) bool {
	tids, err := os.ReadDir(taskDir)
	if err != nil {
		return false
	}
	for _, tid := range tids {
		b, err := os.ReadFile(taskDir + "/" + tid.Name() + "/stat")
		if err != nil {
			return false
		}
		// The state follows the command name in parentheses.
		i := strings.LastIndexByte(string(b), ')')
		if i < 0 || i+2 >= len(b) || (b[i+2] != 'T' && b[i+2] != 't') {
			return false
		}
	}
	return true
}

// Thaw resumes a frozen server.
func (s *Server) Thaw() error { return s.cmd.Process.Signal(syscall.SIGCONT) }

// freePort is a loopback port that nothing listens on, for a server to
// bind. It is outside the kernel's ephemeral range
// (net.ipv4.ip_local_port_range), so that nothing that binds port 0 or
// connects out can take it between this check and the server's bind: a
// port the kernel had just handed out and taken back here once went to a
// fault proxy's listener (port 0) before etcd started, and etcd exited
// with "bind: address already in use".
func freePort(t testing.TB) string {
	lo := ephemeralLow()
	for range 1000 {
		port := 10000 + rand.IntN(lo-10000)
		portsMu.Lock()
		taken := portsGiven[port]
		portsGiven[port] = true
		portsMu.Unlock()
		if taken {
			continue
		}
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue
		}
		ln.Close()
		return fmt.Sprint(port)
	}
	t.Fatal("no free port below the ephemeral range")
	return ""
}

// The ports freePort gave out in this process.
var (
	portsMu    sync.Mutex
	portsGiven = map[int]bool{}
)

// ephemeralLow is the first port of the kernel's ephemeral range (32768
// when it cannot be read; at least 20000).
func ephemeralLow() int {
	lo := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil {
				lo = n
			}
		}
	}
	return max(lo, 20000)
}
