package etcdproc

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/fence-dev/fence/internal/faultproxy"
)

// Etcd37Binary is the etcd 3.7.3 server built from the module proxy by
// test/cluster/tools: $FENCE_ETCD37_BIN, else
// $HOME/.cache/fence-test/etcd-3.7.3 (.ci/run builds it there).
func Etcd37Binary() string {
	if b := os.Getenv("FENCE_ETCD37_BIN"); b != "" {
		return b
	}
	home, _ := os.UserHomeDir()
	return home + "/.cache/fence-test/etcd-3.7.3"
}

// ClusterOptions says how StartCluster runs its members.
type ClusterOptions struct {
	// Binary is the etcd server to run (Binary() when empty).
	Binary string
	// Members is the cluster size (3 when zero).
	Members int
	// Heartbeat and Election are etcd's --heartbeat-interval and
	// --election-timeout (50 ms and 500 ms when zero: the cluster).
	Heartbeat, Election time.Duration
}

// Cluster is an etcd cluster of separate server processes on loopback.
// Every member's client port and peer port is reached through a fault
// proxy of its own: clients use ClientProxy(i).Addr(), and the other
// members reach member i's peer port through PeerProxy(i), so that member
// i can be cut off from its clients, from its peers, or both.
type Cluster struct {
	t       testing.TB
	bin     string
	Members []*Member
	// Election is the members' --election-timeout.
	Election time.Duration
}

// Member is one server process of a Cluster.
type Member struct {
	Name     string
	c        *Cluster
	args     []string
	dir      string
	client   string // host:port the server listens on for clients
	clientPx *faultproxy.Proxy
	peerPx   *faultproxy.Proxy

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
	out  *strings.Builder
	id   string // member id, hex (as etcd's peers send it in X-Server-From)
}

// StartCluster starts opts.Members etcd processes as one cluster, waits
// until it has a leader and answers writes, and stops every process at
// cleanup. Without the binary the test is skipped, unless
// FENCE_REQUIRE_ETCD_SERVER is set, where it fails.
func StartCluster(t testing.TB, opts ClusterOptions) *Cluster {
	t.Helper()
	if opts.Binary == "" {
		opts.Binary = Binary()
	}
	if opts.Members == 0 {
		opts.Members = 3
	}
	if opts.Heartbeat == 0 {
		opts.Heartbeat = 50 * time.Millisecond
	}
	if opts.Election == 0 {
		opts.Election = 500 * time.Millisecond
	}
	if _, err := os.Stat(opts.Binary); err != nil {
		if os.Getenv("FENCE_REQUIRE_ETCD_SERVER") != "" {
			t.Fatalf("etcd server binary %s: %v", opts.Binary, err)
		}
		t.Skipf("etcd server binary not found (%v)", err)
	}
	c := &Cluster{t: t, bin: opts.Binary, Election: opts.Election}
	var initial []string
	for i := 0; i < opts.Members; i++ {
		m := &Member{Name: fmt.Sprintf("m%d", i), c: c, dir: t.TempDir()}
		m.client = "127.0.0.1:" + freePort(t)
		peer := "127.0.0.1:" + freePort(t)
		var err error
		if m.clientPx, err = faultproxy.New(m.client); err != nil {
			t.Fatal(err)
		}
		if m.peerPx, err = faultproxy.New(peer); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.clientPx.Close(); m.peerPx.Close() })
		cu := "http://" + m.client
		m.args = []string{
			"--name", m.Name, "--data-dir", m.dir,
			"--listen-client-urls", cu, "--advertise-client-urls", cu,
			"--listen-peer-urls", "http://" + peer,
			"--initial-advertise-peer-urls", "http://" + m.peerPx.Addr(),
			"--initial-cluster-token", "fence-cluster-test",
			"--heartbeat-interval", fmt.Sprint(opts.Heartbeat.Milliseconds()),
			"--election-timeout", fmt.Sprint(opts.Election.Milliseconds()),
			"--log-level", "error",
		}
		initial = append(initial, m.Name+"=http://"+m.peerPx.Addr())
		c.Members = append(c.Members, m)
	}
	for _, m := range c.Members {
		m.args = append(m.args, "--initial-cluster", strings.Join(initial, ","), "--initial-cluster-state", "new")
		m.start()
		t.Cleanup(m.stop)
	}
	if err := c.WaitHealthy(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	for _, m := range c.Members {
		st, err := m.status(5 * time.Second)
		if err != nil {
			t.Fatalf("etcd %s: status: %v", m.Name, err)
		}
		m.id = fmt.Sprintf("%x", st.Header.MemberId)
		m.peerPx.SetTagger(peerTag)
	}
	return c
}

// peerTag is the member id that an etcd peer connection comes from: every
// rafthttp request names its sender in X-Server-From.
func peerTag(head []byte) string {
	for _, l := range strings.Split(string(head), "\r\n") {
		if k, v, ok := strings.Cut(l, ":"); ok && strings.EqualFold(strings.TrimSpace(k), "X-Server-From") {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// Endpoints are the members' client addresses, through their proxies.
func (c *Cluster) Endpoints() []string {
	var eps []string
	for _, m := range c.Members {
		eps = append(eps, m.clientPx.Addr())
	}
	return eps
}

// Version is the server's version ("3.4.23").
func (c *Cluster) Version() string {
	out, err := exec.Command(c.bin, "--version").Output()
	if err != nil {
		return "?"
	}
	for _, l := range strings.Split(string(out), "\n") {
		if v, ok := strings.CutPrefix(l, "etcd Version: "); ok {
			return strings.TrimSpace(v)
		}
	}
	return "?"
}

// WaitHealthy waits until every running member answers a linearizable
// read through its own proxy (so the cluster has a leader that every
// member knows).
func (c *Cluster) WaitHealthy(within time.Duration) error {
	deadline := time.Now().Add(within)
	for _, m := range c.Members {
		if !m.Running() {
			continue
		}
		for {
			err := m.ping(time.Second)
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("etcd member %s did not answer: %v\n%s", m.Name, err, m.Output())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return nil
}

// Leader is the member that is the leader now, by asking each running,
// unfrozen member's status (nil when none says it is).
func (c *Cluster) Leader() *Member {
	for _, m := range c.Members {
		if !m.Running() {
			continue
		}
		st, err := m.status(time.Second)
		if err == nil && st.Leader == st.Header.MemberId {
			return m
		}
	}
	return nil
}

// ByClientAddr is the member whose client proxy listens on addr.
func (c *Cluster) ByClientAddr(addr string) *Member {
	for _, m := range c.Members {
		if m.clientPx.Addr() == addr {
			return m
		}
	}
	return nil
}

func (m *Member) ping(d time.Duration) error {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{m.client}, DialTimeout: d, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	_, err = cli.Get(ctx, "health")
	return err
}

func (m *Member) status(d time.Duration) (*clientv3.StatusResponse, error) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{m.client}, DialTimeout: d, Logger: zap.NewNop()})
	if err != nil {
		return nil, err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return cli.Status(ctx, m.client)
}

func (m *Member) start() {
	m.mu.Lock()
	defer m.mu.Unlock()
	cmd := exec.Command(m.c.bin, m.args...)
	cmd.Env = append(os.Environ(), "ETCD_UNSUPPORTED_ARCH="+archEnv())
	cmd.SysProcAttr = procAttr()
	m.out = &strings.Builder{}
	cmd.Stdout, cmd.Stderr = syncWriter{&m.mu, m.out}, syncWriter{&m.mu, m.out}
	if err := cmd.Start(); err != nil {
		m.c.t.Fatalf("start etcd %s: %v", m.Name, err)
	}
	m.cmd = cmd
	done := make(chan struct{})
	m.done = done
	go func() { cmd.Wait(); close(done) }()
}

func (m *Member) stop() {
	m.mu.Lock()
	cmd, done := m.cmd, m.done
	m.cmd = nil
	m.mu.Unlock()
	if cmd != nil {
		cmd.Process.Signal(syscall.SIGCONT)
		cmd.Process.Kill()
		<-done
	}
}

// Running tells whether the member's process was started and not killed.
func (m *Member) Running() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.cmd != nil
}

// PID of the member's process (0 when not running).
func (m *Member) PID() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cmd == nil {
		return 0
	}
	return m.cmd.Process.Pid
}

// Output is what the member printed.
func (m *Member) Output() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.out == nil {
		return ""
	}
	return m.out.String()
}

// ClientAddr is the address clients reach the member by (its proxy).
func (m *Member) ClientAddr() string { return m.clientPx.Addr() }

// ClientProxy is the proxy in front of the member's client port.
func (m *Member) ClientProxy() *faultproxy.Proxy { return m.clientPx }

// PeerProxy is the proxy through which the other members reach this one.
func (m *Member) PeerProxy() *faultproxy.Proxy { return m.peerPx }

// Freeze stops the member with SIGSTOP, once every thread is stopped.
func (m *Member) Freeze() error {
	pid := m.PID()
	if pid == 0 {
		return fmt.Errorf("etcd %s is not running", m.Name)
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		return err
	}
	task := fmt.Sprintf("/proc/%d/task", pid)
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if allStopped(task) {
			return nil
		}
	}
	return fmt.Errorf("etcd %s (pid %d) did not stop", m.Name, pid)
}

// Thaw resumes a frozen member.
func (m *Member) Thaw() error {
	pid := m.PID()
	if pid == 0 {
		return fmt.Errorf("etcd %s is not running", m.Name)
	}
	return syscall.Kill(pid, syscall.SIGCONT)
}

// Kill kills the member with SIGKILL and waits until it is gone.
func (m *Member) Kill() { m.stop() }

// Restart starts a killed member again on its data dir and ports.
func (m *Member) Restart() {
	m.mu.Lock()
	for i, a := range m.args {
		if a == "--initial-cluster-state" {
			m.args[i+1] = "existing"
		}
	}
	m.mu.Unlock()
	m.start()
}

// Partition cuts the member off from clients and peers (every connection
// to it stays open and goes silent), or heals it.
func (m *Member) Partition(on bool) {
	mode := faultproxy.Pass
	if on {
		mode = faultproxy.BlackholeBoth
	}
	m.clientPx.SetMode(mode)
	m.peerPx.SetMode(mode)
	for _, o := range m.c.Members {
		if o != m {
			o.peerPx.SetBlocked(m.id, on)
		}
	}
}

type syncWriter struct {
	mu *sync.Mutex
	b  *strings.Builder
}

func (w syncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}
