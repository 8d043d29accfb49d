package e2e

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/fence-dev/fence/internal/faultproxy"
	"github.com/fence-dev/fence/internal/proc"
	"github.com/fence-dev/fence/pkg/guard/sqlguard/pgtest"
)

// Settings of the PostgreSQL nemesis.
const (
	pgContenders = 8
	pgRunFor     = 24 * time.Second
	pgTTL        = 2 * time.Second
	pgMaxIncr    = 40  // increments per holder
	pgProxyMax   = 400 // the partitionable client's: it holds longer, so that it can be caught holding
	pgServerStop = 3 * time.Second
	pgNotice     = 1200 * time.Millisecond // a waiter takes a free lock this soon once the database answers
)

// pgFaults is the nemesis's schedule, cycled: holder faults (as the etcd
// nemesis's, run on the side), the server frozen (SIGSTOP of the
// postmaster and every backend) past the TTL, the server restarted (a
// fast shutdown), and client 0 partitioned from the database by the fault
// proxy while it holds the lock.
var pgFaults = []string{"kill-fence", "partition", "stale-write", "server-stop", "kill-command", "stale-write",
	"server-restart", "freeze-all-racing", "stale-write", "partition", "kill-watchdog", "stale-write", "server-stop",
	"freeze-fence", "stale-write"}

// TestPostgresNemesis is the nemesis of TestNemesisCounter with PostgreSQL
// as the coordinator (`fence --postgres`, FENCE_POSTGRES) and the fenced
// counter in the same database: 8 contenders run `fence run counter --ttl
// 2s -- e2ehelper incr` over and over for 24 s while the faults of
// pgFaults hit the holders, the server and client 0's connections (client 0
// reaches the database, for fence and for its command, only through a
// faultproxy). It checks the merged history as TestNemesisCounter does
// (no increment lost, none accepted from a stale token), samples the
// lock's last_token throughout (never down, across restarts), that a
// partitioned holder's command is gone before partition start + TTL (its
// safe-until is earlier: its last acknowledged renewal was sent before the
// partition), and that once a frozen server answers again a waiter holds
// the lock within pgNotice of its being free to that waiter (at most a TTL
// after the thaw, when the holder's release did not reach the server).
func TestPostgresNemesis(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("the PostgreSQL nemesis runs for about 35 s")
	}
	pg := pgtest.Start(t)
	dbName := pg.CreateDatabase(t)
	db := pg.Open(t, dbName)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if _, err := db.ExecContext(ctx, `CREATE TABLE counter (id INT PRIMARY KEY, value BIGINT NOT NULL, fence BIGINT NOT NULL DEFAULT 0, holder TEXT);
		INSERT INTO counter (id, value) VALUES (1, 0)`); err != nil {
		t.Fatal(err)
	}
	proxy, err := faultproxy.New(fmt.Sprintf("127.0.0.1:%d", pg.Port()))
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	viaProxy := fmt.Sprintf("postgres://%s@%s/%s?sslmode=disable", pgtest.User, proxy.Addr(), dbName)

	dir := t.TempDir()
	logDir, stopFile := filepath.Join(dir, "logs"), filepath.Join(dir, "stop")
	if err := os.Mkdir(logDir, 0o755); err != nil {
		t.Fatal(err)
	}
	base := cleanEnv(t, "E2E_LOG_DIR="+logDir, "E2E_STOP="+stopFile)
	envOf := func(c int) []string {
		url, max := pg.URL(dbName), pgMaxIncr
		if c == 0 {
			url, max = viaProxy, pgProxyMax
		}
		return append(slices.Clone(base), "FENCE_POSTGRES="+url, "E2E_PG_DSN="+url,
			"E2E_MAX="+strconv.Itoa(max), "E2E_CLIENT="+strconv.Itoa(c))
	}

	seed := uint64(time.Now().UnixNano())
	if s, err := strconv.ParseUint(os.Getenv("E2E_SEED"), 10, 64); err == nil {
		seed = s
	}
	t.Logf("postgres nemesis seed %d", seed)

	// The lock's last_token, sampled every 20 ms: it must never go down.
	tokens := &tokenWatch{db: db}
	watchCtx, stopWatch := context.WithCancel(ctx)
	watchDone := make(chan struct{})
	go func() { defer close(watchDone); tokens.run(watchCtx) }()
	defer func() { stopWatch(); <-watchDone }()

	reg := &registry{procs: map[*fenceProc]int{}}
	start := time.Now()
	var running atomic.Bool
	running.Store(true)
	runCtx, stopRun := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		stopRun()
		reg.killAll()
		wg.Wait()
	}()
	codes := map[int]int{}
	exits := map[*fenceProc]int{}
	var codesMu sync.Mutex
	var oddOutput []string
	for c := range pgContenders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for running.Load() && runCtx.Err() == nil {
				p, err := spawnFence(envOf(c), "run", "counter", "--ttl", pgTTL.String(), "--", helperBin, "incr")
				if err != nil {
					t.Error(err)
					return
				}
				reg.add(p, c)
				<-p.done
				reg.remove(p)
				codesMu.Lock()
				codes[p.code]++
				exits[p] = p.code
				if !expectedCode(p.code, p.stderr.String()) && len(oddOutput) < 8 {
					oddOutput = append(oddOutput, fmt.Sprintf("client %d exit %d: %s", c, p.code, p.stderr))
				}
				codesMu.Unlock()
			}
		}()
	}

	nem := &nemesis{rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), reg: reg, logDir: logDir, hit: map[proc.ID]bool{},
		superseded: func(tok uint64) bool {
			qctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
			defer cancel()
			var fence uint64
			err := db.QueryRowContext(qctx, `SELECT fence FROM counter WHERE id = 1`).Scan(&fence)
			return err == nil && fence > tok
		}}
	var (
		holderFaults sync.WaitGroup
		outlived     []time.Duration // partitioned commands: death - (partition + TTL)
		notices      []time.Duration // frozen server thawed -> next grant
		restarts     []time.Duration // restarted server up -> next grant (not asserted)
		serverStops  int
		serverRest   int
	)
	end := start.Add(pgRunFor)
	for i := 0; time.Now().Before(end); i++ {
		time.Sleep(nem.between(300*time.Millisecond, 700*time.Millisecond))
		f := pgFaults[i%len(pgFaults)]
		switch f {
		case "partition":
			d, ok := partitionHolder(reg, proxy, tokens, nil)
			if ok {
				outlived = append(outlived, d)
				nem.count("partition")
			} else {
				nem.count("missed")
			}
		case "server-stop":
			before := tokens.last()
			if err := signalServer(pg.PID(), syscall.SIGSTOP); err != nil {
				t.Fatalf("SIGSTOP the server: %v", err)
			}
			time.Sleep(pgServerStop)
			if err := signalServer(pg.PID(), syscall.SIGCONT); err != nil {
				t.Fatalf("SIGCONT the server: %v", err)
			}
			thawed := time.Now()
			serverStops++
			if at, ok := tokens.above(before, thawed.Add(5*time.Second)); ok {
				notices = append(notices, at.Sub(thawed))
			}
		case "server-restart":
			before := tokens.last()
			pg.Restart(t)
			up := time.Now()
			serverRest++
			if at, ok := tokens.above(before, up.Add(5*time.Second)); ok {
				restarts = append(restarts, at.Sub(up))
			}
		default:
			hs := slices.DeleteFunc(reg.holders(), func(h holderTree) bool {
				return nem.hit[h.fence] || reg.clientOf(h.fence.PID) == 0
			})
			if len(hs) == 0 {
				nem.count("no-holder")
				continue
			}
			h := hs[nem.rng.IntN(len(hs))]
			nem.hit[h.fence] = true
			freezeFor := nem.between(2500*time.Millisecond, 4*time.Second)
			holderFaults.Add(1)
			go func() {
				defer holderFaults.Done()
				if nem.inject(f, h, freezeFor) {
					nem.count(f)
				} else {
					nem.count("missed")
				}
			}()
		}
	}
	holderFaults.Wait()
	running.Store(false)
	if err := os.WriteFile(stopFile, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	allDone := make(chan struct{})
	go func() { wg.Wait(); close(allDone) }()
	select {
	case <-allDone:
	case <-time.After(hangGuard):
		reg.killAll()
		<-allDone
		t.Fatalf("the contenders did not finish within %v of the end", hangGuard)
	}
	proxy.SetMode(faultproxy.Pass)
	elapsed := time.Since(start)

	// Every statement has ended once no helper's or fence's connection
	// (over TCP; the test's are over the unix socket) is left.
	for deadline := time.Now().Add(hangGuard); ; time.Sleep(20 * time.Millisecond) {
		var n int
		if err := db.QueryRowContext(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
			AND client_addr IS NOT NULL`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d connections to the counter's database are still open", n)
		}
	}
	stopWatch()
	<-watchDone
	h, final, torn := counterRun(ctx, t, db, logDir)
	var anomalies []string
	checkStart := time.Now()
	if why := linearizable(h, counterModel(true), 20*time.Second, os.TempDir()); why != "" {
		anomalies = append(anomalies, "(i) against the atomic fenced counter model: "+why)
	}
	checkTime := time.Since(checkStart)
	anomalies = append(anomalies, prefix("(ii) ", tokenOrderAnomalies(h))...)
	tookEffect, a3 := counterAnomalies(h, final)
	anomalies = append(anomalies, prefix("(iii) ", a3)...)
	if torn > 0 {
		anomalies = append(anomalies, fmt.Sprintf("%d torn log lines", torn))
	}
	anomalies = append(anomalies, tokens.anomalies()...)

	maxOutlived := time.Duration(-1 << 62)
	for _, d := range outlived {
		maxOutlived = max(maxOutlived, d)
	}
	anomalies = append(anomalies, partitionAnomalies(outlived)...)
	stops, kills := nem.counts()
	t.Logf("postgres nemesis: ran %v (porcupine %v); faults: holders frozen %d, killed %d, partitioned %d, server stopped %d, restarted %d; by action %v",
		elapsed.Round(time.Millisecond), checkTime.Round(time.Millisecond), stops, kills, len(outlived), serverStops, serverRest, nem.byAction())
	t.Logf("postgres nemesis: ops=%d increments committed=%d (+%d of unknown outcome that took effect) final value %d fence %d; writes refused as stale=%d; unknown=%d; holders=%d; token samples %d, max token %d; fence exit codes %v",
		len(h.ops), h.incrOK, tookEffect, final.Value, final.Fence, h.refused, h.unknown, h.claims, tokens.samples, tokens.last(), codes)
	t.Logf("postgres nemesis: partitioned commands gone relative to partition+TTL: %v (max %v); frozen server thawed -> next grant: %v; restarted server up -> next grant: %v",
		outlived, maxOutlived, notices, restarts)
	for _, s := range oddOutput {
		t.Logf("unexpected fence exit: %s", s)
	}
	for i, a := range anomalies {
		if i == 20 {
			t.Errorf("... and %d more anomalies", len(anomalies)-i)
			break
		}
		t.Errorf("ANOMALY %s", a)
	}
	if len(a3) == 0 && int64(h.incrOK+tookEffect) != final.Value {
		t.Errorf("final value %d, accepted increments %d + unknown ones that took effect %d", final.Value, h.incrOK, tookEffect)
	}
	if len(outlived) == 0 || serverStops == 0 || serverRest == 0 || stops == 0 || kills == 0 {
		t.Errorf("the nemesis partitioned %d holders, stopped the server %d times, restarted it %d times, froze %d holders, killed %d: want each",
			len(outlived), serverStops, serverRest, stops, kills)
	}
	if len(notices) == 0 {
		t.Errorf("no grant followed a frozen server's thaw within 5 s")
	}
	// The freeze outlasts the TTL: the holder's fence stops its command
	// and exits without its release reaching the server, so the lease is
	// still on record at the thaw. A waiter takes it over once it has seen
	// it unrenewed for a whole TTL on its own clock (the package's
	// invariant); a lock released at the thaw is taken within pgNotice.
	for _, d := range notices {
		if d > pgTTL+pgNotice {
			t.Errorf("a waiter took the lock %v after the frozen server answered again, want within the TTL and %v (%v)", d, pgNotice, pgTTL+pgNotice)
		}
	}
	if h.refused == 0 {
		t.Errorf("no write was refused as stale: the nemesis never got a stale holder's write to the database")
	}
}

// clientOf is the contender running fence process pid (-1 when none).
func (r *registry) clientOf(pid int) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	for p, c := range r.procs {
		if p.cmd.Process.Pid == pid {
			return c
		}
	}
	return -1
}

// partitionHolder waits (up to 8 s) until client 0 holds the lock with its
// command running, blackholes its connections (fence's and its command's),
// calls plant (nil in the nemesis: a test's planted bug) with the tree, and
// returns how long after partition start + TTL its command was seen gone
// (negative: before), polling every 2 ms; a command still running 3 s past
// it counts as gone then. It heals the partition once another holder got
// the lock (or 3 s past the TTL).
func partitionHolder(reg *registry, proxy *faultproxy.Proxy, tokens *tokenWatch, plant func(holderTree)) (time.Duration, bool) {
	var h holderTree
	found := false
	for t0 := time.Now(); !found && time.Since(t0) < 8*time.Second; time.Sleep(10 * time.Millisecond) {
		for _, x := range reg.holders() {
			if reg.clientOf(x.fence.PID) == 0 {
				h, found = x, true
				break
			}
		}
	}
	if !found {
		return 0, false
	}
	before := tokens.last()
	start := time.Now()
	proxy.SetMode(faultproxy.BlackholeBoth)
	defer proxy.SetMode(faultproxy.Pass)
	if plant != nil {
		plant(h)
	}
	if proc.Check(h.command) == proc.Gone { // it ended on its own meanwhile
		return 0, false
	}
	deadline := start.Add(pgTTL)
	for proc.Check(h.command) != proc.Gone && time.Since(deadline) <= 3*time.Second {
		time.Sleep(2 * time.Millisecond)
	}
	gone := time.Now()
	tokens.above(before, deadline.Add(3*time.Second)) // a successor took over: heal
	return gone.Sub(deadline), true
}

// partitionAnomalies is the nemesis's check of the partitioned holders:
// each one's command gone before partition start + TTL (outlived: how long
// after that each was seen gone).
func partitionAnomalies(outlived []time.Duration) []string {
	var out []string
	for _, d := range outlived {
		switch {
		case d > 3*time.Second: // partitionHolder stops looking then
			out = append(out, fmt.Sprintf("a partitioned holder's command still ran %v after partition start + TTL", d))
		case d > 0:
			out = append(out, fmt.Sprintf("a partitioned holder's command outlived partition start + TTL by %v", d))
		}
	}
	return out
}

// signalServer sends sig to the postmaster pid and every process under it.
func signalServer(pid int, sig syscall.Signal) error {
	st, err := proc.ReadStat(pid)
	if err != nil {
		return err
	}
	ds, err := proc.Descendants(pid)
	if err != nil {
		return err
	}
	ids := []proc.ID{st.ID()}
	for _, d := range ds {
		ids = append(ids, d.ID())
	}
	if sig == syscall.SIGCONT {
		slices.Reverse(ids) // the backends first, the postmaster last
	}
	for _, id := range ids {
		_ = signalID(id, sig)
	}
	return nil
}

// tokenWatch samples the counter lock's last_token in fence's locks table.
type tokenWatch struct {
	db *sql.DB

	mu      sync.Mutex
	max     uint64
	samples int
	downs   []string
}

func (w *tokenWatch) run(ctx context.Context) {
	for ctx.Err() == nil {
		qctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		var tok uint64
		err := w.db.QueryRowContext(qctx, `SELECT last_token FROM fence.locks WHERE name = 'counter'`).Scan(&tok)
		cancel()
		if err == nil {
			w.mu.Lock()
			w.samples++
			if tok < w.max && len(w.downs) < 5 {
				w.downs = append(w.downs, fmt.Sprintf("last_token went down from %d to %d", w.max, tok))
			}
			w.max = max(w.max, tok)
			w.mu.Unlock()
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (w *tokenWatch) last() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.max
}

func (w *tokenWatch) anomalies() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.downs)
}

// above waits until a sample exceeds tok (until the deadline) and returns
// when it was seen.
func (w *tokenWatch) above(tok uint64, deadline time.Time) (time.Time, bool) {
	for time.Now().Before(deadline) {
		if w.last() > tok {
			return time.Now(), true
		}
		time.Sleep(5 * time.Millisecond)
	}
	return time.Time{}, false
}
