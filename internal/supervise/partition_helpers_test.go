//go:build linux

package supervise_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/fence-dev/fence/internal/faultproxy"
	"github.com/fence-dev/fence/internal/proc"
	"github.com/fence-dev/fence/internal/supervise"
	"github.com/fence-dev/fence/pkg/clock"
	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/coord/etcd"
)

// The fault tests of partition_test.go run fence as a process of its own,
// as fault_test.go does, but with one addition: fence's coordinator is
// wrapped so that every acknowledged grant and renewal is written to a file
// with its send time on the boot clock. That log gives a lower bound of the
// lease's expiry on the server that does not depend on when the server gets
// round to deleting the key: etcd starts a lease's TTL no earlier than it
// received the request, so the lease lives at least until the latest
// (acknowledged send + granted TTL).

// ackFenceEnv carries an ackFenceConfig, JSON-encoded, to a test binary
// started as fence with an acknowledgment log. It is dispatched from init,
// which runs before TestMain, so main_test.go needs no change.
const ackFenceEnv = "FENCE_SUPERVISE_TEST_ACK_FENCE"

type ackFenceConfig struct {
	Endpoints []string
	AckLog    string
	Opts      supervise.Options // the JSON-able part
}

func init() {
	if cfg := os.Getenv(ackFenceEnv); cfg != "" {
		os.Exit(ackFenceMain(cfg))
	}
}

func ackFenceMain(cfg string) int {
	var fc ackFenceConfig
	if err := json.Unmarshal([]byte(cfg), &fc); err != nil {
		fmt.Fprintln(os.Stderr, "fence test helper:", err)
		return 125
	}
	// Neither the watchdog nor the command may start as this helper.
	os.Unsetenv(ackFenceEnv)
	log, err := os.OpenFile(fc.AckLog, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fence test helper:", err)
		return 125
	}
	defer log.Close()
	ctx := context.Background()
	c, err := etcd.New(ctx, fc.Endpoints, etcd.WithPrefix("/fence-test/"), etcd.WithDialTimeout(5*time.Second))
	if err != nil {
		fmt.Fprintln(os.Stderr, "fence:", err)
		return 125
	}
	defer c.Close()
	a := &ackLogger{Coordinator: c, log: log}
	for _, kv := range fc.Opts.Env {
		if dir, ok := strings.CutPrefix(kv, "D="); ok {
			a.info = dir + "/info" // where heartbeatScript writes its PID
		}
	}
	code, err := supervise.Run(ctx, a, fc.Opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fence:", err)
	}
	return code
}

// ackLogger is a coordinator that writes "ack SENT TTL" (boot-clock and
// duration nanoseconds) for every grant and renewal it returns.
type ackLogger struct {
	coord.Coordinator
	mu   sync.Mutex
	log  *os.File
	info string // heartbeatScript's info file ("" if none)
}

func (a *ackLogger) note(sent time.Time, ttl time.Duration) {
	a.mu.Lock()
	defer a.mu.Unlock()
	fmt.Fprintf(a.log, "ack %d %d\n", int64(clock.Now().Add(-time.Since(sent))), int64(ttl))
}

func (a *ackLogger) Acquire(ctx context.Context, name string, opts coord.AcquireOptions) (*coord.Lease, error) {
	l, err := a.Coordinator.Acquire(ctx, name, opts)
	if err == nil {
		a.note(l.Sent, l.TTL)
	}
	return l, err
}

func (a *ackLogger) Renew(ctx context.Context, name, leaseID string) (coord.Renewal, error) {
	r, err := a.Coordinator.Renew(ctx, name, leaseID)
	if err == nil {
		a.note(r.Sent, r.TTL)
	}
	return r, err
}

// Release writes "release SENT LIVE" before it asks: SENT in boot-clock
// nanoseconds (on etcd, fence's own release deletes the lease's key, so a
// deletion after it may not be the lease's expiry), and LIVE, how many
// processes of the command's group were alive at that moment (-1: no
// command started). Counted here, in fence, as the release is asked, it
// needs no comparison of instants measured by different processes.
func (a *ackLogger) Release(ctx context.Context, name, leaseID string) error {
	at := clock.Now()
	live := a.liveMembers()
	a.mu.Lock()
	fmt.Fprintf(a.log, "release %d %d\n", int64(at), live)
	a.mu.Unlock()
	return a.Coordinator.Release(ctx, name, leaseID)
}

// liveMembers counts the live (not zombie) processes of the command's group,
// -1 when the command never reported its PID.
func (a *ackLogger) liveMembers() int {
	b, err := os.ReadFile(a.info)
	if a.info == "" || err != nil {
		return -1
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return -1
	}
	pgid, err := strconv.Atoi(f[0])
	if err != nil {
		return -1
	}
	members, err := proc.GroupMembers(pgid, proc.ID{})
	if err != nil {
		return -1
	}
	return len(members)
}

// releaseSent reads from an acknowledgment log when fence first asked to
// release the lease (0: never) and how many processes of the command's
// group were alive then.
func releaseSent(t *testing.T, path string) (clock.Boot, int) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, ln := range strings.Split(string(b), "\n") {
		var at int64
		var live int
		if _, err := fmt.Sscanf(ln, "release %d %d", &at, &live); err == nil {
			return clock.Boot(at), live
		}
	}
	return 0, 0
}

// acks reads an acknowledgment log: how many acknowledgments it holds and
// the latest sent+TTL among them (the lower bound of the lease's expiry).
func acks(t *testing.T, path string) (n int, expiry clock.Boot) {
	t.Helper()
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0, 0
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var sent, ttl int64
		if _, err := fmt.Sscanf(sc.Text(), "ack %d %d", &sent, &ttl); err != nil {
			continue // a line being written
		}
		n++
		expiry = max(expiry, clock.Boot(sent).Add(time.Duration(ttl)))
	}
	return n, expiry
}

// waitAcks waits until the log holds at least n acknowledgments.
func waitAcks(t *testing.T, path string, n int) {
	t.Helper()
	for end := time.Now().Add(hang); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if got, _ := acks(t, path); got >= n {
			return
		}
	}
	t.Fatalf("fence did not get %d acknowledgments from etcd", n)
}

// startAckFence starts fence (the test binary) on endpoints, logging its
// acknowledgments to ackLog.
func startAckFence(t *testing.T, endpoints []string, ackLog string, o supervise.Options) *fenceProc {
	t.Helper()
	return spawnFence(t, ackFenceEnv, ackFenceConfig{Endpoints: endpoints, AckLog: ackLog, Opts: o})
}

// heartbeatScript is the command of the fault tests: it ignores SIGTERM (so
// it dies only of the SIGKILL at the end of the grace period, the worst
// case for the margin), writes "PID TOKEN LEASE" to $D/info, then appends
// the boot clock (/proc/uptime, in centiseconds, read without a fork) to
// $D/hb every 20ms.
const heartbeatScript = `trap '' TERM
echo "$$ $FENCE_TOKEN $FENCE_LEASE_ID" > "$D/info"
while :; do read up idle < /proc/uptime; echo "$up" >> "$D/hb"; sleep 0.02; done`

// commandInfo is what heartbeatScript reports about itself.
type commandInfo struct {
	leader  proc.ID // the shell: its PID is the command's process group
	token   uint64
	leaseID string
}

func readCommandInfo(t *testing.T, dir string) commandInfo {
	t.Helper()
	f := strings.Fields(waitFile(t, dir+"/info", 1)[0])
	if len(f) != 3 {
		t.Fatalf("bad info line %q", f)
	}
	pid, err := strconv.Atoi(f[0])
	if err != nil {
		t.Fatal(err)
	}
	token, err := strconv.ParseUint(f[1], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	leader, err := proc.Lookup(pid)
	if err != nil {
		t.Fatal(err)
	}
	return commandInfo{leader: leader, token: token, leaseID: f[2]}
}

// lastHeartbeat is the boot-clock time of the last heartbeat (rounded down
// to 10ms, as /proc/uptime shows it).
func lastHeartbeat(t *testing.T, dir string) clock.Boot {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(readFile(t, dir+"/hb")), "\n")
	if len(lines) == 0 {
		t.Fatal("no heartbeat")
	}
	// The last line may have been cut by the SIGKILL: take the last whole one.
	for i := len(lines) - 1; i >= 0; i-- {
		whole, frac, ok := strings.Cut(lines[i], ".")
		if !ok || len(frac) != 2 {
			continue
		}
		s, err1 := strconv.ParseInt(whole, 10, 64)
		cs, err2 := strconv.ParseInt(frac, 10, 64)
		if err1 == nil && err2 == nil {
			return clock.Boot(s*int64(time.Second) + cs*int64(10*time.Millisecond))
		}
	}
	t.Fatalf("no readable heartbeat in %q", lines)
	return 0
}

// groupEnd is when the command's processes died.
type groupEnd struct {
	leaderDied clock.Boot // the leader's pidfd became readable
	// allDead is the first instant after that at which the group had no
	// live member: an upper bound of the time its last process died
	// (/proc is read in a tight loop, so within a few milliseconds).
	allDead clock.Boot
	err     error
}

// watchGroupEnd reports, once the leader has died, when the last member of
// its process group did.
func watchGroupEnd(d *deathWatch, leader proc.ID) <-chan groupEnd {
	out := make(chan groupEnd, 1)
	go func() {
		at := <-d.died
		d.died <- at
		for {
			members, err := proc.GroupMembers(leader.PID, leader)
			if err != nil || len(members) == 0 {
				out <- groupEnd{leaderDied: at, allDead: clock.Now(), err: err}
				return
			}
			time.Sleep(time.Millisecond)
		}
	}()
	return out
}

func waitGroupEnd(t *testing.T, ch <-chan groupEnd) groupEnd {
	t.Helper()
	select {
	case e := <-ch:
		if e.err != nil {
			t.Fatal(e.err)
		}
		return e
	case <-time.After(hang):
		t.Fatal("the command was never stopped")
		return groupEnd{}
	}
}

// assertGroupReaped checks, once fence has exited, that no process of the
// command's group is alive, and waits until none exists any more, not even
// as a zombie: kill(-pgid, 0) fails with ESRCH. A zombie may outlive the
// watchdog for a moment (one that died between the watchdog's last wait and
// its exit goes to init to be reaped): that is logged, not failed, as a
// zombie runs no code.
func assertGroupReaped(t *testing.T, leader proc.ID) {
	t.Helper()
	start := time.Now()
	var zombies []proc.Stat
	for {
		live, err := proc.GroupMembers(leader.PID, leader)
		if err != nil {
			t.Fatal(err)
		}
		if len(live) > 0 {
			t.Errorf("processes %v of the command are alive after fence exited", live)
			_ = unix.Kill(-leader.PID, syscall.SIGKILL)
			return
		}
		err = unix.Kill(-leader.PID, 0)
		if errors.Is(err, unix.ESRCH) {
			break
		}
		if zombies == nil {
			zombies = groupZombies(leader.PID)
		}
		if time.Since(start) > hang {
			t.Errorf("the command's process group %d still exists %v after fence exited (kill: %v): %+v", leader.PID, hang, err, zombies)
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	if zombies != nil {
		t.Logf("after fence exited, zombies of the command's group waited %v for init to reap them: %+v",
			time.Since(start).Round(time.Millisecond), zombies)
	}
}

// groupZombies lists the processes of group pgid that have exited but were
// not reaped.
func groupZombies(pgid int) []proc.Stat {
	ents, _ := os.ReadDir("/proc")
	out := []proc.Stat{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, err := proc.ReadStat(pid); err == nil && st.PGID == pgid {
			out = append(out, st)
		}
	}
	return out
}

// keyDeletion is what the observer saw when the lease's key disappeared.
type keyDeletion struct {
	at   clock.Boot // when the watch event arrived
	live []proc.ID  // members of the command's group alive at that instant
	err  error
}

// watchKeyDeletion watches, from a client connected to etcd directly, the
// deletion of the key of lease leaseID on lock name (written by the etcd
// backend under prefix /fence-test/), from revision from on. When the
// deletion arrives it reads at once which members of the command's group
// are still alive.
func watchKeyDeletion(t *testing.T, cli *clientv3.Client, name, leaseID string, from int64, leader proc.ID) <-chan keyDeletion {
	t.Helper()
	key := "/fence-test/locks/" + url.PathEscape(name) + "/" + leaseID
	ctx, cancel := context.WithCancel(context.Background())
	wch := cli.Watch(ctx, key, clientv3.WithRev(from), clientv3.WithFilterPut())
	out := make(chan keyDeletion, 1)
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		for wr := range wch {
			if err := wr.Err(); err != nil {
				out <- keyDeletion{err: err}
				return
			}
			for _, ev := range wr.Events {
				if ev.Type == mvccpb.DELETE {
					at := clock.Now()
					live, err := proc.GroupMembers(leader.PID, leader)
					out <- keyDeletion{at: at, live: live, err: err}
					return
				}
			}
		}
		out <- keyDeletion{err: errors.New("watch ended")}
	}()
	return out
}

func waitDeletion(t *testing.T, ch <-chan keyDeletion) keyDeletion {
	t.Helper()
	select {
	case d := <-ch:
		if d.err != nil {
			t.Fatalf("watching the lease's key: %v", d.err)
		}
		return d
	case <-time.After(hang):
		t.Fatal("the lease's key was never deleted")
		return keyDeletion{}
	}
}

// directClient is a plain etcd client of endpoints, closed at cleanup.
func directClient(t *testing.T, endpoints []string) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// directCoordinator is fence's etcd backend on endpoints, closed at cleanup.
func directCoordinator(t *testing.T, endpoints []string) coord.Coordinator {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hang)
	defer cancel()
	c, err := etcd.New(ctx, endpoints, etcd.WithPrefix("/fence-test/"), etcd.WithDialTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// contender is a second holder that waits for the lock.
type contender struct {
	done chan struct{}
	l    *coord.Lease
	at   clock.Boot
	err  error
}

// contend starts waiting for name on c; the lease is released at cleanup.
func contend(t *testing.T, c coord.Coordinator, name string, ttl time.Duration) *contender {
	t.Helper()
	k := &contender{done: make(chan struct{})}
	ctx, cancel := context.WithTimeout(context.Background(), hang)
	go func() {
		defer close(k.done)
		k.l, k.err = c.Acquire(ctx, name, coord.AcquireOptions{TTL: ttl, Wait: coord.WaitForever, Holder: "contender"})
		k.at = clock.Now()
	}()
	t.Cleanup(func() {
		cancel()
		<-k.done
		if k.l != nil {
			rctx, rcancel := context.WithTimeout(context.Background(), 5*time.Second)
			_ = c.Release(rctx, k.l.Name, k.l.ID)
			rcancel()
		}
	})
	return k
}

func (k *contender) wait(t *testing.T) *coord.Lease {
	t.Helper()
	select {
	case <-k.done:
	case <-time.After(hang):
		t.Fatal("the contender never got the lock")
	}
	if k.err != nil {
		t.Fatalf("contender: %v", k.err)
	}
	return k.l
}

// waitQueued waits until name has a waiter.
func waitQueued(t *testing.T, c coord.Coordinator, name string) {
	t.Helper()
	for end := time.Now().Add(hang); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		info, err := c.Inspect(ctx, name)
		cancel()
		if err == nil && info.Waiters > 0 {
			return
		}
	}
	t.Fatalf("nobody queued for %q", name)
}

func ms(d time.Duration) int64 { return d.Milliseconds() }

// parseLeaseID reads a lease id as fence writes it (hex).
func parseLeaseID(s string) (clientv3.LeaseID, error) {
	v, err := strconv.ParseUint(s, 16, 63)
	return clientv3.LeaseID(v), err
}

// reconnect ends a fault the way a partition often ends: the proxy is
// closed, which resets fence's connections (so that requests lost in the
// blackhole fail at once instead of waiting for their deadline), and a
// plain forwarder to target listens on the proxy's address in its place,
// so fence's client reconnects and its retries go through.
func reconnect(t *testing.T, p *faultproxy.Proxy, target string) {
	t.Helper()
	addr := p.Addr()
	p.Close()
	var ln net.Listener
	var err error
	for range 50 {
		if ln, err = net.Listen("tcp", addr); err == nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("listen again on %s: %v", addr, err)
	}
	var (
		mu    sync.Mutex
		conns []net.Conn
		wg    sync.WaitGroup
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, c, s)
			mu.Unlock()
			wg.Add(2)
			go func() { defer wg.Done(); _, _ = io.Copy(s, c); s.Close() }()
			go func() { defer wg.Done(); _, _ = io.Copy(c, s); c.Close() }()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
}
