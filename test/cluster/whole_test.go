package cluster

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/fence-dev/fence/internal/etcdproc"
)

func eachVersion(t *testing.T, f func(t *testing.T, c *etcdproc.Cluster, version string)) {
	for version, bin := range versions(t) {
		t.Run(version, func(t *testing.T) {
			f(t, etcdproc.StartCluster(t, etcdproc.ClusterOptions{Binary: bin}), version)
		})
	}
}

// TestQuorumLoss: two members, the leader and a follower, stopped for 8 s
// (at most: they resume once fence has exited). The holder's command is
// dead before its lease could expire, fence exits 76 within about a second
// of that, and the waiter acquires with a larger token once the quorum is
// back.
func TestQuorumLoss(t *testing.T) {
	eachVersion(t, func(t *testing.T, c *etcdproc.Cluster, version string) {
		const ttl = 3 * time.Second
		log := filepath.Join(t.TempDir(), "log")
		holder := start(t, c, "holder", "quorum", log, 60*time.Second, "--ttl", ttl.String())
		waitStarted(t, log, "holder")
		waiter := start(t, c, "waiter", "quorum", log, 200*time.Millisecond, "--ttl", ttl.String())
		time.Sleep(ttl / 2)
		// The leader and a follower: a leader left alone acknowledges
		// keep-alives until it steps down (renewals need no quorum), and
		// the lease then lives on from that later renewal; with the
		// leader frozen no renewal is acknowledged after lost, so the
		// lease lives at least until lost - RenewInterval + TTL.
		leader := c.Leader()
		if leader == nil {
			t.Fatal("no leader")
		}
		frozen := []*etcdproc.Member{leader}
		for _, m := range c.Members {
			if m != leader && len(frozen) < 2 {
				frozen = append(frozen, m)
			}
		}
		lost := time.Now()
		for _, m := range frozen {
			if err := m.Freeze(); err != nil {
				t.Fatal(err)
			}
		}
		hc := holder.wait(t, 8*time.Second)
		for _, m := range frozen {
			m.Thaw()
		}
		wc := waiter.wait(t, 60*time.Second)
		ivs := checkLog(t, log, map[string]time.Time{"holder": holder.end, "waiter": waiter.end})
		if hc != 76 {
			t.Errorf("holder exit %d, want 76:\n%s", hc, holder.output())
		}
		if wc != 0 {
			t.Errorf("waiter exit %d:\n%s", wc, waiter.output())
		}
		var margin time.Duration
		if len(ivs) > 0 && ivs[0].name == "holder" && !ivs[0].end.IsZero() {
			// The last acknowledged renewal left at most a renewal
			// interval before the quorum was lost: the lease lives at
			// least until then + TTL.
			expiry := lost.Add(-ttl / 3).Add(ttl)
			margin = expiry.Sub(ivs[0].end)
			if margin <= 0 {
				t.Errorf("the command ended %v after its lease could have expired", -margin)
			}
			if d := holder.end.Sub(ivs[0].end); d > 1500*time.Millisecond {
				t.Errorf("fence exited %v after its command ended", d)
			}
		}
		t.Logf("lost the quorum at %s; holder:\n%s", lost.Format("15:04:05.000"), holder.output())
		record("quorum loss (leader+follower stopped)", version, ttl, hc != 0, t.Failed(), margin, 0)
	})
}

// TestLeaderKilled: the leader SIGKILLed and restarted; the holder survives,
// unless the two members left had no leader through its renewal window
// (recorded as leaderless, as in TestSingleMemberFault).
func TestLeaderKilled(t *testing.T) {
	eachVersion(t, func(t *testing.T, c *etcdproc.Cluster, version string) {
		ttls := []time.Duration{3 * time.Second}
		if fullRun() {
			ttls = append(ttls, 15*time.Second)
		}
		for _, ttl := range ttls {
			log := filepath.Join(t.TempDir(), "log")
			lock := "killed-" + ttl.String()
			holder := start(t, c, "holder", lock, log, ttl+4*time.Second, "--ttl", ttl.String())
			waitStarted(t, log, "holder")
			waiter := start(t, c, "waiter", lock, log, 200*time.Millisecond, "--ttl", ttl.String())
			time.Sleep(ttl / 3)
			lw := c.WatchLeader(50 * time.Millisecond)
			l := c.Leader()
			l.Kill()
			time.Sleep(2 * time.Second)
			l.Restart()
			hc := holder.wait(t, 2*ttl+30*time.Second)
			wc := waiter.wait(t, 2*ttl+30*time.Second)
			lw.Stop()
			ivs := checkLog(t, log, map[string]time.Time{"holder": holder.end, "waiter": waiter.end})
			var latency time.Duration
			if len(ivs) == 2 {
				latency = ivs[1].start.Sub(ivs[0].end)
			}
			// The two members left must elect a leader before the
			// holder's renewal window closes (1.1 s at --ttl 3s); a
			// stop in a trial where they took longer (3.7.3 once had
			// none for 2.2 s after the kill, in CI) is the cluster's,
			// as in TestSingleMemberFault.
			led, leaderless := time.Duration(0), false
			if hc != 0 {
				led, leaderless = leaderlessStop(lw, holder, ttl)
			}
			record("leader SIGKILL + restart", version, ttl, hc != 0 && !leaderless, t.Failed(), 0, latency)
			switch {
			case leaderless:
				noteLeaderless(t, "leader SIGKILL + restart", version, ttl, led, holder)
				if wc != 0 {
					t.Errorf("waiter exit %d:\n%s", wc, waiter.output())
				}
			case hc != 0 || wc != 0:
				t.Errorf("holder exit %d, waiter exit %d (a majority named a leader for %v of the last %v before a stop):\n%s\n%s",
					hc, wc, led.Round(time.Millisecond), renewWindow(ttl), holder.output(), waiter.output())
			}
			if err := c.WaitHealthy(30 * time.Second); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// TestWatchMemberStalled: each member in turn is frozen while a waiter
// waits and the holder releases; one of them carries the waiter's watch.
// The waiter acquires within about a second of the release.
func TestWatchMemberStalled(t *testing.T) {
	eachVersion(t, func(t *testing.T, c *etcdproc.Cluster, version string) {
		const ttl = 15 * time.Second // a frozen leader's resume does not revoke (etcd#15247)
		for _, m := range c.Members {
			log := filepath.Join(t.TempDir(), "log")
			lock := "watch-" + m.Name
			holder := start(t, c, "holder", lock, log, 3*time.Second, "--ttl", ttl.String())
			waitStarted(t, log, "holder")
			waiter := start(t, c, "waiter", lock, log, 200*time.Millisecond, "--ttl", ttl.String())
			time.Sleep(time.Second)
			if err := m.Freeze(); err != nil {
				t.Fatal(err)
			}
			hc := holder.wait(t, 30*time.Second)
			wc, ended := waiter.waitFor(5 * time.Second)
			m.Thaw()
			if !ended && os.Getenv("FENCE_CLUSTER_DUMP") != "" {
				waiter.cmd.Process.Signal(syscall.SIGABRT)
				waiter.waitFor(2 * time.Second)
			}
			if !ended {
				t.Fatalf("%s frozen: the waiter did not acquire within 5 s of the release\nholder:\n%s\nwaiter:\n%s", m.Name, holder.output(), waiter.output())
			}
			ivs := checkLog(t, log, map[string]time.Time{"holder": holder.end, "waiter": waiter.end})
			var latency time.Duration
			if len(ivs) == 2 {
				latency = ivs[1].start.Sub(ivs[0].end)
				if latency > 1500*time.Millisecond {
					t.Errorf("%s frozen: the waiter started %v after the release", m.Name, latency)
				}
			}
			if t.Failed() {
				t.Logf("%s frozen; holder:\n%s\nwaiter:\n%s", m.Name, holder.output(), waiter.output())
			}
			record("one member stopped, waiter waits", version, ttl, hc != 0, t.Failed(), 0, latency)
			if hc != 0 || wc != 0 {
				t.Errorf("holder exit %d, waiter exit %d:\n%s\n%s", hc, wc, holder.output(), waiter.output())
			}
			if err := c.WaitHealthy(30 * time.Second); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// TestWholeClusterStall: every member frozen (20 s in the full run, 8 s
// otherwise) while a waiter with no --wait limit waits: its lease ends
// meanwhile, and it still acquires afterwards.
func TestWholeClusterStall(t *testing.T) {
	stall := 8 * time.Second
	if fullRun() {
		stall = 20 * time.Second
	}
	eachVersion(t, func(t *testing.T, c *etcdproc.Cluster, version string) {
		const ttl = 3 * time.Second
		log := filepath.Join(t.TempDir(), "log")
		holder := start(t, c, "holder", "whole", log, 500*time.Millisecond, "--ttl", ttl.String())
		waitStarted(t, log, "holder")
		waiter := start(t, c, "waiter", "whole", log, 200*time.Millisecond, "--ttl", ttl.String())
		time.Sleep(200 * time.Millisecond)
		for _, m := range c.Members {
			if err := m.Freeze(); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(stall)
		thawed := time.Now()
		for _, m := range c.Members {
			m.Thaw()
		}
		holder.wait(t, 30*time.Second)
		wc := waiter.wait(t, 60*time.Second)
		ivs := checkLog(t, log, map[string]time.Time{"holder": holder.end, "waiter": waiter.end})
		var latency time.Duration
		if len(ivs) == 2 {
			latency = ivs[1].start.Sub(thawed)
		}
		record("whole cluster stopped "+stall.String(), version, ttl, false, t.Failed(), 0, latency)
		if wc != 0 {
			t.Errorf("the waiter gave up (exit %d):\n%s", wc, waiter.output())
		}
	})
}
