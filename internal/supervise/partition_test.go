//go:build linux

package supervise_test

import (
	"context"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fence-dev/fence/internal/etcdproc"
	"github.com/fence-dev/fence/internal/etcdtest"
	"github.com/fence-dev/fence/internal/exitcode"
	"github.com/fence-dev/fence/internal/faultproxy"
	"github.com/fence-dev/fence/internal/supervise"
	"github.com/fence-dev/fence/pkg/clock"
	"github.com/fence-dev/fence/pkg/coord"
)

// faultTTL is the lease's TTL in the fault tests. With it fence renews
// every 667ms, sends TERM 1.4s after the send of the last acknowledged
// renewal (TTL - margin 200ms - grace 400ms) and SIGKILL at 1.8s; the lease
// lives on etcd until at least 2s after that send.
const faultTTL = 2 * time.Second

// partitionCases are the network faults between fence and etcd.
var partitionCases = []struct {
	name  string
	fault func(*faultproxy.Proxy)
}{
	{"blackhole-both", func(p *faultproxy.Proxy) { p.SetMode(faultproxy.BlackholeBoth) }},
	{"blackhole-requests", func(p *faultproxy.Proxy) { p.SetMode(faultproxy.BlackholeRequests) }},
	{"blackhole-responses", func(p *faultproxy.Proxy) { p.SetMode(faultproxy.BlackholeResponses) }},
	{"delay-responses", func(p *faultproxy.Proxy) { p.SetResponseDelay(faultTTL / 2) }},
}

// TestPartition: fence reaches etcd through a TCP proxy that, once fence
// holds the lock and has renewed it, blackholes both directions, the
// requests only or the responses only, or delays every response by half the
// TTL. The command ignores TERM and writes a heartbeat. An observer
// connected to etcd directly watches the lease's key, and a contender waits
// for the lock.
//
// In each case the command's whole process group is dead before the key
// disappears on etcd (the lease's server-side expiry, as a successor sees
// it), and before the lower bound of that expiry given by the latest
// acknowledged renewal (send time + TTL); the contender then gets the lock
// with a higher token, and fence exits 76. The margins are logged as
// "margin case=NAME ms=N" (against the key's deletion) and
// "margin case=NAME/acked ms=N" (against the acknowledged lower bound).
//
// With delayed responses, the renewals could in principle still arrive in
// time to keep the lease safe; the test accepts that outcome too (the
// command must then be running under a live lease) and logs which one
// happened as "outcome case=NAME ...". With fence's renewals (a read, then
// the keep-alive, each answered a TTL/2 late, and abandoned after TTL/3)
// the outcome is a stop.
func TestPartition(t *testing.T) {
	t.Parallel()
	srv := etcdtest.Start(t)
	target := strings.TrimPrefix(srv.Endpoints()[0], "http://")
	observer := directClient(t, srv.Endpoints())
	rival := directCoordinator(t, srv.Endpoints())
	for _, tc := range partitionCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p, err := faultproxy.New(target)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { p.Close() })
			dir := t.TempDir()
			ackLog, name := dir+"/acks", "partition-"+tc.name
			f := startAckFence(t, []string{p.Addr()}, ackLog, supervise.Options{
				Lock: name, TTL: faultTTL, Command: []string{heartbeatScript}, Shell: true,
				Env:      append(os.Environ(), "D="+dir),
				Location: map[string]string{"FENCE_ENDPOINTS": p.Addr(), "FENCE_PREFIX": "/fence-test/"},
			})
			ci := readCommandInfo(t, dir)
			ends := watchGroupEnd(watchDeath(t, ci.leader.PID), ci.leader)
			deleted := watchKeyDeletion(t, observer, name, ci.leaseID, int64(ci.token), ci.leader)
			k := contend(t, rival, name, faultTTL)
			waitQueued(t, rival, name)
			waitAcks(t, ackLog, 2) // the grant and a renewal, through the proxy

			tc.fault(p)
			faultAt := clock.Now()

			var del keyDeletion
			if tc.name == "delay-responses" {
				select {
				case del = <-deleted:
					if del.err != nil {
						t.Fatalf("watching the lease's key: %v", del.err)
					}
				case <-time.After(4 * faultTTL):
					// The renewals kept the lease: then the command must be
					// running under a live lease.
					renewedLate(t, f, observer, p, ci, tc.name)
					return
				}
			} else {
				del = waitDeletion(t, deleted)
			}

			if len(del.live) > 0 {
				t.Fatalf("the lease's key was deleted on etcd while the command's processes %v were alive", del.live)
			}
			end := waitGroupEnd(t, ends)
			if end.allDead >= del.at {
				t.Fatalf("the command's last process died %v after the lease's key was deleted", end.allDead.Sub(del.at))
			}
			if hb := lastHeartbeat(t, dir); hb > end.allDead {
				t.Fatalf("a heartbeat at %v came after the command was dead (%v)", hb, end.allDead)
			}
			l := k.wait(t)
			if l.Token <= ci.token {
				t.Fatalf("the contender's token %d is not above fence's %d", l.Token, ci.token)
			}
			if k.at <= end.allDead {
				t.Fatalf("the contender held the lock %v before the command was dead", end.allDead.Sub(k.at))
			}
			t.Logf("margin case=%s ms=%d", tc.name, ms(del.at.Sub(end.allDead)))

			// End the fault, so that fence can release and exit.
			reconnect(t, p, target)
			code := f.wait(t)
			assertGroupReaped(t, ci.leader)
			if code != exitcode.LeaseLost {
				t.Fatalf("fence exited %d, want 76; stderr:\n%s", code, f.stderr.String())
			}
			msg := stopLine(t, f, name)
			_, floor := acks(t, ackLog)
			// The release must come after the command's whole group is dead:
			// fence counted the group's live processes as it asked.
			rel, live := releaseSent(t, ackLog)
			if rel != 0 && live != 0 {
				t.Fatalf("fence asked to release the lease while %d processes of the command's group were alive (or unknown: -1)", live)
			}
			if floor > del.at {
				// Only fence's own release may delete the key before the
				// lease can have expired (requests pass in some of these
				// faults, and the release is sent once the command is dead).
				if rel == 0 || rel > del.at {
					t.Fatalf("etcd deleted the key %v before the lease's acknowledged lower bound, and fence had not asked to release it: the measurement is wrong", floor.Sub(del.at))
				}
				t.Logf("%s: the key was deleted by fence's release, %v before the lease could expire", tc.name, floor.Sub(del.at).Round(time.Millisecond))
			}
			if end.allDead >= floor {
				t.Fatalf("the command's last process died %v after the acknowledged lower bound of the lease's expiry", end.allDead.Sub(floor))
			}
			t.Logf("margin case=%s/acked ms=%d", tc.name, ms(floor.Sub(end.allDead)))
			if tc.name == "delay-responses" {
				t.Logf("outcome case=%s stopped: fence stopped the command (renewals answered too late)", tc.name)
			}
			t.Logf("%s: fault at 0; leader dead at +%v, all dead at +%v; key deleted at +%v; contender held at +%v; fence: %s",
				tc.name, end.leaderDied.Sub(faultAt).Round(time.Millisecond), end.allDead.Sub(faultAt).Round(time.Millisecond),
				del.at.Sub(faultAt).Round(time.Millisecond), k.at.Sub(faultAt).Round(time.Millisecond), msg)
		})
	}
}

// renewedLate is the other acceptable outcome of delayed responses: the
// renewals still arrive in time, fence keeps the command running, and the
// lease is alive on etcd the whole time the command runs. It checks that,
// then ends the run with SIGINT.
func renewedLate(t *testing.T, f *fenceProc, observer *clientv3.Client, p *faultproxy.Proxy, ci commandInfo, name string) {
	t.Helper()
	id, err := parseLeaseID(ci.leaseID)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), hang)
	defer cancel()
	before := alive(ci.leader.PID)
	ttl, err := observer.TimeToLive(ctx, id)
	after := alive(ci.leader.PID)
	if err != nil || !before || !after || ttl.TTL <= 0 {
		t.Fatalf("command alive %v/%v, lease TTL %v (%v): the command runs without a live lease", before, after, ttl, err)
	}
	t.Logf("outcome case=%s renewed: the command still runs, its lease has %ds left on etcd", name, ttl.TTL)
	p.SetResponseDelay(0)
	if err := f.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if code := f.wait(t); code != 128+int(syscall.SIGINT) {
		t.Fatalf("fence exited %d after SIGINT; stderr:\n%s", code, f.stderr.String())
	}
}

// TestFrozenEtcd: a separate etcd process (Debian's etcd-server) is frozen
// with SIGSTOP while fence holds a lease on it. fence cannot renew; its
// command (which ignores TERM) is dead before the lease could expire; after
// the thaw fence exits 76 and the next holder's token is higher.
//
// The server is frozen, so the time its key disappears says nothing (etcd
// deletes it only once thawed). The margin is measured against the lower
// bound of the lease's expiry that fence's own acknowledged renewals give:
// the latest send time + granted TTL (etcd starts the TTL no earlier than
// it receives the request, and an expired lease cannot be renewed after the
// thaw). It is logged as "margin case=frozen-etcd ms=N".
func TestFrozenEtcd(t *testing.T) {
	t.Parallel()
	srv := etcdproc.Start(t)
	dir := t.TempDir()
	ackLog, name := dir+"/acks", "frozen"
	f := startAckFence(t, srv.Endpoints(), ackLog, supervise.Options{
		Lock: name, TTL: faultTTL, Command: []string{heartbeatScript}, Shell: true,
		Env:      append(os.Environ(), "D="+dir),
		Location: map[string]string{"FENCE_ENDPOINTS": srv.Addr(), "FENCE_PREFIX": "/fence-test/"},
	})
	ci := readCommandInfo(t, dir)
	ends := watchGroupEnd(watchDeath(t, ci.leader.PID), ci.leader)
	observer := directClient(t, srv.Endpoints())
	deleted := watchKeyDeletion(t, observer, name, ci.leaseID, int64(ci.token), ci.leader)
	waitAcks(t, ackLog, 2)

	if err := srv.Freeze(); err != nil {
		t.Fatal(err)
	}
	frozeAt := clock.Now()
	thawed := false
	defer func() {
		if !thawed {
			_ = srv.Thaw()
		}
	}()
	end := waitGroupEnd(t, ends)
	if hb := lastHeartbeat(t, dir); hb > end.allDead {
		t.Fatalf("a heartbeat at %v came after the command was dead (%v)", hb, end.allDead)
	}
	if end.allDead <= frozeAt {
		t.Fatal("the command died before etcd was frozen")
	}
	// Keep etcd frozen until the lease has certainly expired on it: it
	// received nothing after the freeze, so the lease ends by frozeAt + TTL.
	time.Sleep(frozeAt.Add(faultTTL + 500*time.Millisecond).Sub(clock.Now()))
	if err := srv.Thaw(); err != nil {
		t.Fatal(err)
	}
	thawed = true
	thawAt := clock.Now()

	code := f.wait(t)
	assertGroupReaped(t, ci.leader)
	if code != exitcode.LeaseLost {
		t.Fatalf("fence exited %d, want 76; stderr:\n%s", code, f.stderr.String())
	}
	msg := stopLine(t, f, name)
	_, floor := acks(t, ackLog) // fence has exited: the log is complete
	if floor > frozeAt.Add(faultTTL) {
		t.Fatalf("an acknowledgment was sent %v after etcd was frozen", floor.Sub(frozeAt.Add(faultTTL)))
	}
	if end.allDead >= floor {
		t.Fatalf("the command's last process died %v after the acknowledged lower bound of the lease's expiry", end.allDead.Sub(floor))
	}
	t.Logf("margin case=frozen-etcd ms=%d", ms(floor.Sub(end.allDead)))

	del := waitDeletion(t, deleted)
	if len(del.live) > 0 {
		t.Fatalf("processes %v of the command alive when the key was deleted", del.live)
	}
	ctx, cancel := context.WithTimeout(context.Background(), hang)
	defer cancel()
	next := directCoordinator(t, srv.Endpoints())
	l, err := next.Acquire(ctx, name, coord.AcquireOptions{TTL: faultTTL, Wait: coord.WaitForever, Holder: "next"})
	if err != nil {
		t.Fatal(err)
	}
	defer next.Release(context.Background(), l.Name, l.ID)
	if l.Token <= ci.token {
		t.Fatalf("the next holder's token %d is not above fence's %d", l.Token, ci.token)
	}
	t.Logf("frozen at 0; leader dead at +%v, all dead at +%v; lease's acknowledged lower bound +%v; thawed at +%v; key deleted at +%v; fence: %s",
		end.leaderDied.Sub(frozeAt).Round(time.Millisecond), end.allDead.Sub(frozeAt).Round(time.Millisecond),
		floor.Sub(frozeAt).Round(time.Millisecond), thawAt.Sub(frozeAt).Round(time.Millisecond),
		del.at.Sub(frozeAt).Round(time.Millisecond), msg)
}

// stopLine checks what fence said on stderr after it stopped the command
// for its lease: one line saying so, after at most a warning that the
// lease could not be released (the release is sent while the coordinator
// is still cut off, and fence gives up on it after 10s). It returns the
// line, without its "fence: ".
func stopLine(t *testing.T, f *fenceProc, lock string) string {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(f.stderr.String()), "\n")
	last := lines[len(lines)-1]
	if !strings.HasPrefix(last, `fence: lease on "`+lock+`"`) || !strings.Contains(last, "the command was stopped") {
		t.Fatalf("stderr should end with one line about the lease:\n%s", f.stderr.String())
	}
	for _, l := range lines[:len(lines)-1] {
		if !strings.HasPrefix(l, `fence: warning: release lease on "`+lock+`"`) {
			t.Fatalf("stderr has more than the stop and a release warning:\n%s", f.stderr.String())
		}
	}
	if len(lines) > 1 {
		t.Logf("fence could not release the lease: %s", strings.TrimPrefix(lines[0], "fence: warning: "))
	}
	return strings.TrimPrefix(last, "fence: ")
}
