//go:build linux

package supervise_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"

	"github.com/fence-dev/fence/internal/etcdtest"
	"github.com/fence-dev/fence/internal/exitcode"
	"github.com/fence-dev/fence/internal/faultproxy"
	"github.com/fence-dev/fence/internal/history/auto"
	"github.com/fence-dev/fence/internal/supervise"
	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/coord/etcd"
	"github.com/fence-dev/fence/pkg/history"
)

// The lease-watch tests run with --ttl 60s: fence renews every 20s, so a
// revoke that stops the command within noticeGuard was noticed by the watch
// of the lease's key, not by a renewal. noticeGuard only turns a miss into a
// failure; it is no measure of how fast the notice is.
const (
	watchTTL    = 60 * time.Second
	noticeGuard = 10 * time.Second
)

// watchRun is a fence run on etcd, in this process, through the history
// recorder that `fence run` uses (the lease watch is found through its
// Unwrap).
type watchRun struct {
	srv     *etcdtest.Server
	c       coord.Coordinator // the run's coordinator (recorder over etcd)
	other   coord.Coordinator // another client: `fence revoke`, inspection
	pidFile string
	res     chan runResult
}

// startWatchRun starts the run of script (sh; $P is a file for its PIDs) on
// a new etcd server. The run reaches etcd at endpoints(srv), or directly
// when endpoints is nil.
func startWatchRun(t *testing.T, lock, script string, endpoints func(*etcdtest.Server) []string) *watchRun {
	return startWatchRunOn(t, lock, script, endpoints, nil)
}

// startWatchRunOn is startWatchRun on an etcd client of the test's, dialled
// with opts as well, when opts is not nil (etcd.NewFromClient).
func startWatchRunOn(t *testing.T, lock, script string, endpoints func(*etcdtest.Server) []string, opts []grpc.DialOption) *watchRun {
	t.Helper()
	srv := etcdtest.Start(t)
	eps := srv.Endpoints()
	if endpoints != nil {
		eps = endpoints(srv)
	}
	ctx, cancel := context.WithTimeout(context.Background(), hang)
	defer cancel()
	var inner coord.Coordinator
	var err error
	if opts == nil {
		inner, err = etcd.New(ctx, eps, etcd.WithPrefix("/fence-test/"), etcd.WithDialTimeout(5*time.Second))
	} else {
		var cli *clientv3.Client
		cli, err = clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
			DialKeepAliveTime: 10 * time.Second, DialKeepAliveTimeout: 2 * time.Second, DialOptions: opts})
		if err == nil {
			t.Cleanup(func() { cli.Close() })
			inner, err = etcd.NewFromClient(ctx, cli, etcd.WithPrefix("/fence-test/"))
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	c, err := auto.Wrap(inner)
	if err != nil {
		inner.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	w := &watchRun{srv: srv, c: c, other: directCoordinator(t, srv.Endpoints()), pidFile: tempPath(t, "pids"),
		res: make(chan runResult, 1)}
	b := &backend{name: "etcd", c: c, endpoints: eps}
	go func() {
		code, err := run(t, b, supervise.Options{Lock: lock, TTL: watchTTL, Shell: true,
			Command: []string{fmt.Sprintf("P=%s; %s", shell(w.pidFile), script)}})
		w.res <- runResult{code, err}
	}()
	t.Cleanup(func() {
		// A failed test may leave the command running: end it.
		if b, err := os.ReadFile(w.pidFile); err == nil {
			for _, f := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil && pid > 0 {
					_ = unix.Kill(pid, syscall.SIGKILL)
				}
			}
		}
		select {
		case <-w.res:
		case <-time.After(hang):
		}
	})
	return w
}

// sleeper writes its PID and its child's to $P and waits for the child.
const sleeper = `sleep 600 & echo $$ > "$P.tmp"; echo $! >> "$P.tmp"; mv "$P.tmp" "$P"; wait`

// result waits (hang-bounded) for the run's end.
func (w *watchRun) result(t *testing.T, bound time.Duration) runResult {
	t.Helper()
	select {
	case r := <-w.res:
		w.res <- r // for the cleanup
		return r
	case <-time.After(bound):
		t.Fatalf("fence run did not end within %v", bound)
		return runResult{}
	}
}

// assertGone waits, within bound, for every process of the command to end.
func assertGone(t *testing.T, ps []int, bound time.Duration) {
	t.Helper()
	for end := time.Now().Add(bound); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		n := 0
		for _, pid := range ps {
			if alive(pid) {
				n++
			}
		}
		if n == 0 {
			return
		}
	}
	t.Fatalf("the command's processes %v still run %v after the revoke", ps, bound)
}

// history returns the kinds of lock's recorded events.
func (w *watchRun) history(t *testing.T, lock string) []history.Kind {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hang)
	defer cancel()
	evs, err := w.c.(history.Store).History(ctx, lock, 0)
	if err != nil {
		t.Fatal(err)
	}
	var kinds []history.Kind
	for _, ev := range evs {
		kinds = append(kinds, ev.Kind)
	}
	return kinds
}

// revoke ends the holder's lease from another client, as `fence revoke`.
func (w *watchRun) revoke(t *testing.T, lock string) coord.LockInfo {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hang)
	defer cancel()
	info, err := w.other.Revoke(ctx, lock)
	if err != nil {
		t.Fatal(err)
	}
	return info
}

// assertLostAtOnce: after a revoke, the command's processes are gone and
// fence exits 76 with the message of a lease a renewal found lost, well
// before the next renewal; the history has the lease_lost event.
func (w *watchRun) assertLostAtOnce(t *testing.T, lock string, ps []int, info coord.LockInfo) {
	t.Helper()
	revoked := time.Now()
	assertGone(t, ps, noticeGuard)
	r := w.result(t, noticeGuard)
	t.Logf("stopped %v after the revoke; fence says: %v", time.Since(revoked).Round(time.Millisecond), r.err)
	want := fmt.Sprintf(`lease on %q (token %d) was lost on the coordinator (lease %s on %q has ended): the command was stopped (SIGTERM)`,
		lock, info.Token, info.LeaseID, lock)
	if r.code != exitcode.LeaseLost || r.err == nil || r.err.Error() != want {
		t.Fatalf("code %d, %v; want 76, %s", r.code, r.err, want)
	}
	kinds := w.history(t, lock)
	if !containsKind(kinds, history.LeaseLost) {
		t.Errorf("history of %q: %v, want a %s event", lock, kinds, history.LeaseLost)
	}
}

func containsKind(kinds []history.Kind, k history.Kind) bool {
	for _, x := range kinds {
		if x == k {
			return true
		}
	}
	return false
}

// TestRevokeNoticedByWatch: on etcd, `fence revoke` of a running fence run
// with --ttl 60s stops its command's group and fence exits 76 long before
// the next renewal (20s): the run watches its lease's key.
func TestRevokeNoticedByWatch(t *testing.T) {
	t.Parallel()
	w := startWatchRun(t, "watched", sleeper, nil)
	ps := pids(t, waitFile(t, w.pidFile, 2))
	info := w.revoke(t, "watched")
	w.assertLostAtOnce(t, "watched", ps, info)
}

// TestWatchedRunEndsNormally: a run whose command ends releases its lease
// (which deletes the key the run watches) and exits with the command's
// code, never 76; nothing is recorded as lost.
func TestWatchedRunEndsNormally(t *testing.T) {
	t.Parallel()
	for _, code := range []int{0, 3} {
		w := startWatchRun(t, "normal", fmt.Sprintf(`echo $$ > "$P.tmp"; echo $$ >> "$P.tmp"; mv "$P.tmp" "$P"; sleep 0.2; exit %d`, code), nil)
		r := w.result(t, hang)
		if r.code != code || r.err != nil {
			t.Fatalf("code %d, %v; want %d and no error", r.code, r.err, code)
		}
		ctx, cancel := context.WithTimeout(context.Background(), hang)
		info, err := w.other.Inspect(ctx, "normal")
		cancel()
		if err != nil || info.Held {
			t.Fatalf("after the run: %+v, %v; want the lock free", info, err)
		}
		if kinds := w.history(t, "normal"); containsKind(kinds, history.LeaseLost) || !containsKind(kinds, history.Released) {
			t.Fatalf("history %v: want released and no lease_lost", kinds)
		}
	}
}

// TestWatchSurvivesLostConnection: the watch's connection to etcd breaks
// under a running fence run; that is no revocation: the command goes on (its
// lease is still valid), and the watch, reconnected, still notices a revoke
// at once.
//
//   - restart: etcd restarts (the client resumes the watch by itself);
//   - partition: fence's traffic is blackholed while the history is
//     compacted past the revision its watch has seen, then the connection
//     is reset: the resumed watch is cancelled for the compaction, and the
//     run reads its key again rather than take that for a revocation.
func TestWatchSurvivesLostConnection(t *testing.T) {
	t.Parallel()
	t.Run("restart", func(t *testing.T) {
		t.Parallel()
		w := startWatchRun(t, "restarted", sleeper, nil)
		ps := pids(t, waitFile(t, w.pidFile, 2))
		w.srv.Restart(t)
		w.assertRunsOn(t, "restarted", ps)
		info := w.revoke(t, "restarted")
		w.assertLostAtOnce(t, "restarted", ps, info)
	})
	t.Run("partition", func(t *testing.T) {
		t.Parallel()
		var (
			p      *faultproxy.Proxy
			target string
		)
		watching, opt := watchCreated("/fence-test/locks/partitioned/")
		w := startWatchRunOn(t, "partitioned", sleeper, func(srv *etcdtest.Server) []string {
			target = strings.TrimPrefix(srv.Endpoints()[0], "http://")
			var err error
			if p, err = faultproxy.New(target); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { p.Close() })
			return []string{p.Addr()}
		}, []grpc.DialOption{opt})
		ps := pids(t, waitFile(t, w.pidFile, 2))
		// The run's watch asks for the key's events from the revision of
		// its read on: once it has sent that, cut fence off.
		select {
		case <-watching:
		case <-time.After(hang):
			t.Fatal("the run's lease watch was never created")
		}
		p.SetMode(faultproxy.BlackholeBoth)
		cli := directClient(t, w.srv.Endpoints())
		ctx, cancel := context.WithTimeout(context.Background(), hang)
		defer cancel()
		for range 3 {
			if _, err := cli.Put(ctx, "/fence-test/other", "x"); err != nil {
				t.Fatal(err)
			}
		}
		resp, err := cli.Get(ctx, "/fence-test/other")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cli.Compact(ctx, resp.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second) // fence's requests meanwhile go nowhere
		reconnect(t, p, target)
		w.assertRunsOn(t, "partitioned", ps)
		info := w.revoke(t, "partitioned")
		w.assertLostAtOnce(t, "partitioned", ps, info)
	})
}

// assertRunsOn: once the run's coordinator answers again, the command and
// fence still run.
func (w *watchRun) assertRunsOn(t *testing.T, lock string, ps []int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hang)
	info, err := w.c.Inspect(ctx, lock)
	cancel()
	if err != nil || !info.Held {
		t.Fatalf("after the fault: %+v, %v; want the lock held", info, err)
	}
	time.Sleep(500 * time.Millisecond) // room for a wrong stop
	for _, pid := range ps {
		if !alive(pid) {
			t.Fatalf("process %d of the command ended after the fault", pid)
		}
	}
	select {
	case r := <-w.res:
		t.Fatalf("fence run ended after the fault: %d, %v", r.code, r.err)
	default:
	}
}

// watchCreated returns a dial option that closes the channel the first
// time the client asks etcd to watch a key that starts with prefix, and
// that channel. A watch is created from a revision the client read, so
// once it was sent, that read is done.
func watchCreated(prefix string) (<-chan struct{}, grpc.DialOption) {
	ch := make(chan struct{})
	var once sync.Once
	return ch, grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn,
		method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		cs, err := streamer(ctx, desc, cc, method, opts...)
		if err != nil || method != "/etcdserverpb.Watch/Watch" {
			return cs, err
		}
		return &sendSpy{ClientStream: cs, sent: func(m any) {
			if r, ok := m.(*pb.WatchRequest); ok {
				if cr := r.GetCreateRequest(); cr != nil && strings.HasPrefix(string(cr.Key), prefix) {
					once.Do(func() { close(ch) })
				}
			}
		}}, nil
	})
}

// sendSpy tells sent of every message its stream sends.
type sendSpy struct {
	grpc.ClientStream
	sent func(any)
}

func (s *sendSpy) SendMsg(m any) error {
	err := s.ClientStream.SendMsg(m)
	if err == nil {
		s.sent(m)
	}
	return err
}
