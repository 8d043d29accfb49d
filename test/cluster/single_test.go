package cluster

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fence-dev/fence/internal/etcdproc"
)

// stallFor is how long a single member stays stalled or partitioned (in
// CI at --ttl 3s: ciStall, longer than the 2.1 s from the last
// acknowledged renewal to the stop, which is all the fault must outlast).
const (
	stallFor = 6 * time.Second
	ciStall  = 3 * time.Second
)

// TestSingleMemberFault: with the quorum intact, stalling (SIGSTOP) or
// partitioning (clients and peers, through the proxies) one member, the
// leader, a follower or the member carrying the holder's streams, never
// stops a healthy holder, at TTL 3 s and 15 s; a waiter queued behind it
// takes the lock after it, with a larger token. CI runs every kind at
// --ttl 3s and the stalled stream member at 15s; the full run (see the
// package doc) every kind at both, FENCE_CLUSTER_TRIALS times.
func TestSingleMemberFault(t *testing.T) {
	for version, bin := range versions(t) {
		t.Run(version, func(t *testing.T) {
			c := etcdproc.StartCluster(t, etcdproc.ClusterOptions{Binary: bin})
			for _, fault := range []string{"stop", "partition"} {
				for _, target := range []string{"stream", "leader", "follower"} {
					for _, ttl := range []time.Duration{3 * time.Second, 15 * time.Second} {
						stall := stallFor
						if !fullRun() {
							if ttl > 3*time.Second && (fault != "stop" || target != "stream") {
								continue
							}
							if ttl == 3*time.Second {
								stall = ciStall
							}
						}
						for i := 0; i < trials(); i++ {
							name := fmt.Sprintf("%s-%s-%v-%d", fault, target, ttl, i)
							t.Run(name, func(t *testing.T) {
								singleFault(t, c, version, fault, target, ttl, stall)
							})
						}
					}
				}
			}
		})
	}
}

func singleFault(t *testing.T, c *etcdproc.Cluster, version, fault, target string, ttl, stallFor time.Duration) {
	log := filepath.Join(t.TempDir(), "log")
	lock := "single-" + filepath.Base(t.Name())
	measure := ttl / 3 * 6 / 5
	work := measure + stallFor + ttl/2 + 2*time.Second
	holder := start(t, c, "holder", lock, log, work, "--ttl", ttl.String())
	waitStarted(t, log, "holder")

	// The member that carries the holder's renewals: the one proxy that
	// forwards answers while only the holder talks to the cluster.
	var carrier *etcdproc.Member
	before := map[*etcdproc.Member]int64{}
	for _, m := range c.Members {
		before[m] = m.ClientProxy().Forwarded()
	}
	time.Sleep(measure)
	for _, m := range c.Members {
		if m.ClientProxy().Forwarded() > before[m] && (carrier == nil || m.ClientProxy().Forwarded()-before[m] > carrier.ClientProxy().Forwarded()-before[carrier]) {
			carrier = m
		}
	}
	if carrier == nil {
		t.Fatal("no member carries the holder's renewals")
	}
	leader := c.Leader()
	var victim *etcdproc.Member
	switch target {
	case "stream":
		victim = carrier
	case "leader":
		victim = leader
	case "follower":
		for _, m := range c.Members {
			if m != leader && (victim == nil || m != carrier) {
				victim = m
			}
		}
	}
	if victim == nil {
		t.Fatal("no leader")
	}
	waiter := start(t, c, "waiter", lock, log, 200*time.Millisecond, "--ttl", ttl.String())
	time.Sleep(200 * time.Millisecond)
	t.Logf("%s %s (%s; leader %s, holder's streams on %s) for %v", fault, victim.Name, target, leader.Name, carrier.Name, stallFor)
	switch fault {
	case "stop":
		if err := victim.Freeze(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(stallFor)
		victim.Thaw()
	case "partition":
		victim.Partition(true)
		time.Sleep(stallFor)
		victim.Partition(false)
	}
	hc := holder.wait(t, work+ttl+30*time.Second)
	wc := waiter.wait(t, 2*ttl+30*time.Second)
	ivs := checkLog(t, log, map[string]time.Time{"holder": holder.end, "waiter": waiter.end})
	overlapped := t.Failed()
	var latency time.Duration
	if len(ivs) == 2 && !ivs[0].end.IsZero() {
		latency = ivs[1].start.Sub(ivs[0].end)
	}
	// etcd#15247: a frozen leader that resumes revokes the leases that
	// expired by its stale clock, although the new leader kept them alive;
	// the fix (PR #16822) skips its leadership check when raft ticks look
	// recent, which they do at once after SIGCONT: 3.7.3 has it too (a
	// plain clientv3 KeepAliveOnce loop loses its lease the same way). That
	// is the server's loss, reported as "has ended", not fence's stop.
	// Told apart from a stop of fence's own by what fence saw: its lease
	// watch found the key deleted ("has ended") while its renewals were
	// acknowledged (no renewal had failed, so fence's deadline was far).
	// The log check above still holds it to stopping the command before
	// the next holder started.
	out := holder.output()
	serverRevoked := hc == 76 && fault == "stop" && victim == leader && ttl < stallFor+ttl/3 &&
		strings.Contains(out, "has ended") && !strings.Contains(out, "not renewed in time") && !strings.Contains(out, "no longer safe")
	record(fault+" one member: "+target, version, ttl, hc != 0 && !serverRevoked, overlapped, 0, latency)
	if serverRevoked {
		t.Logf("etcd revoked the lease when its frozen old leader resumed (etcd#15247): %s", strings.TrimSpace(holder.output()))
		recordRevoke(fault+" one member: "+target, version, ttl)
		return
	}
	if hc != 0 {
		t.Errorf("the holder was stopped (exit %d) with the quorum intact:\n%s", hc, holder.output())
	}
	if wc != 0 {
		t.Errorf("the waiter exited %d:\n%s", wc, waiter.output())
	}
	if err := c.WaitHealthy(30 * time.Second); err != nil {
		t.Fatal(err)
	}
}

// waitStarted waits until name's command logged its start.
func waitStarted(t *testing.T, log, name string) interval {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		for _, iv := range readLog(t, log) {
			if iv.name == name && !iv.start.IsZero() {
				return iv
			}
		}
	}
	t.Fatalf("%s's command did not start", name)
	return interval{}
}
