package e2e

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/fence-dev/fence/internal/faultproxy"
	"github.com/fence-dev/fence/pkg/guard/sqlguard/pgtest"
)

// pgFaultRig is a PostgreSQL server, one database, a fault proxy in front
// of it and a watch of the lock "counter"'s last_token, for the tests of
// the PostgreSQL nemesis's checks.
type pgFaultRig struct {
	pg        *pgtest.Server
	proxy     *faultproxy.Proxy
	tokens    *tokenWatch
	direct    []string // fence's environment, straight to the server
	proxied   []string // through the proxy
	reg       *registry
	stopWatch func()
}

func newPGFaultRig(t *testing.T) *pgFaultRig {
	pg := pgtest.Start(t)
	dbName := pg.CreateDatabase(t)
	db := pg.Open(t, dbName)
	proxy, err := faultproxy.New(fmt.Sprintf("127.0.0.1:%d", pg.Port()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	viaProxy := fmt.Sprintf("postgres://%s@%s/%s?sslmode=disable", pgtest.User, proxy.Addr(), dbName)
	r := &pgFaultRig{pg: pg, proxy: proxy, tokens: &tokenWatch{db: db}, reg: &registry{procs: map[*fenceProc]int{}},
		direct: cleanEnv(t, "FENCE_POSTGRES="+pg.URL(dbName)), proxied: cleanEnv(t, "FENCE_POSTGRES="+viaProxy)}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); r.tokens.run(ctx) }()
	r.stopWatch = func() { cancel(); <-done }
	t.Cleanup(r.stopWatch)
	t.Cleanup(r.reg.killAll)
	return r
}

// start starts `fence run counter ARGS` as client c (0: through the proxy).
func (r *pgFaultRig) start(t *testing.T, c int, args ...string) *fenceProc {
	env := r.direct
	if c == 0 {
		env = r.proxied
	}
	p := startFence(t, env, append([]string{"run", "counter"}, args...)...)
	r.reg.add(p, c)
	return p
}

// TestPostgresPartitionCheckFails proves the PostgreSQL nemesis's check of
// a partitioned holder able to fail: client 0 holds "counter" (TTL 2 s)
// through the fault proxy, client 1 waits for it straight to the server,
// and partitionHolder blackholes client 0. With fence as it is the
// command is gone before partition start + TTL (partitionAnomalies: none);
// with a planted bug, fence's stop disabled (fence and its watchdog
// frozen by SIGSTOP as the partition starts, the command left running),
// the check must report the command outliving its TTL.
func TestPostgresPartitionCheckFails(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts PostgreSQL and partitions a holder for about 5 s")
	}
	for _, c := range []struct {
		name  string
		plant func(holderTree)
		want  bool // anomalies
	}{
		{"fence", nil, false},
		{"planted: no stop", func(h holderTree) {
			_ = signalID(h.watchdog, syscall.SIGSTOP)
			_ = signalID(h.fence, syscall.SIGSTOP)
		}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := newPGFaultRig(t)
			holder := r.start(t, 0, "--ttl", pgTTL.String(), "--", "sleep", "60")
			outlived, ok := partitionHolder(r.reg, r.proxy, r.tokens, func(h holderTree) {
				r.start(t, 1, "--ttl", pgTTL.String(), "--", "sleep", "60") // a successor, waiting
				if c.plant != nil {
					c.plant(h)
				}
			})
			if !ok {
				t.Fatalf("client 0 never held the lock with its command running:\n%s", holder.stderr)
			}
			got := partitionAnomalies([]time.Duration{outlived})
			t.Logf("command gone %v after partition start + TTL; anomalies %q", outlived, got)
			if (len(got) > 0) != c.want {
				t.Errorf("partitionAnomalies reported %q, want anomalies: %v", got, c.want)
			}
		})
	}
}

// TestPostgresWaiterNoticesFreeLock measures how soon a waiter takes a lock
// freed while the database could not answer it, once it answers again
// (the issue: within a second). Holder H (TTL 10 s, so that no lease
// expires meanwhile) runs `sleep 1.5`; waiter W waits for the lock; then,
// for 3 s, either the server is frozen (SIGSTOP of the postmaster and its
// backends: H's release waits for it) or W alone is partitioned from it by
// the fault proxy (H releases meanwhile). From the thaw or the heal to W's
// command running must take less than a second.
func TestPostgresWaiterNoticesFreeLock(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts PostgreSQL and stops it for 3 s twice")
	}
	const outage, within = 3 * time.Second, time.Second
	for _, c := range []struct {
		name   string
		waiter int // 0: through the proxy
		cut    func(r *pgFaultRig) error
		heal   func(r *pgFaultRig) error
	}{
		{"server frozen", 1,
			func(r *pgFaultRig) error { return signalServer(r.pg.PID(), syscall.SIGSTOP) },
			func(r *pgFaultRig) error { return signalServer(r.pg.PID(), syscall.SIGCONT) }},
		{"waiter partitioned", 0,
			func(r *pgFaultRig) error { r.proxy.SetMode(faultproxy.BlackholeBoth); return nil },
			func(r *pgFaultRig) error { r.proxy.SetMode(faultproxy.Pass); return nil }},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := newPGFaultRig(t)
			holding := func(client int) bool {
				for _, h := range r.reg.holders() {
					if r.reg.clientOf(h.fence.PID) == client {
						return true
					}
				}
				return false
			}
			await := func(client int, limit time.Duration) (time.Duration, bool) {
				t0 := time.Now()
				for !holding(client) {
					if time.Since(t0) > limit {
						return time.Since(t0), false
					}
					time.Sleep(2 * time.Millisecond)
				}
				return time.Since(t0), true
			}
			h := r.start(t, 2, "--ttl", "10s", "--", "sleep", "1.5")
			if _, ok := await(2, 10*time.Second); !ok {
				t.Fatalf("the holder never ran its command:\n%s", h.stderr)
			}
			w := r.start(t, c.waiter, "--ttl", "10s", "--", "sleep", "60")
			time.Sleep(500 * time.Millisecond) // W waits
			if holding(c.waiter) {
				t.Fatal("the waiter holds the lock while the holder runs")
			}
			if err := c.cut(r); err != nil {
				t.Fatal(err)
			}
			time.Sleep(outage)
			if err := c.heal(r); err != nil {
				t.Fatal(err)
			}
			took, ok := await(c.waiter, 15*time.Second)
			code, out := h.wait(t)
			t.Logf("waiter's command ran %v after the database answered again (holder exit %d)", took, code)
			switch {
			case !ok:
				t.Fatalf("the waiter did not hold the lock within %v of the heal:\nholder:\n%s\nwaiter:\n%s", took, out, w.stderr)
			case took > within:
				t.Errorf("the waiter held the lock %v after the database answered again, want within %v:\nholder:\n%s\nwaiter:\n%s",
					took, within, out, w.stderr)
			}
		})
	}
}
