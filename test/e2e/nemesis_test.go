package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/fence-dev/fence/internal/proc"
	"github.com/fence-dev/fence/pkg/guard/sqlguard/pgtest"
	"github.com/fence-dev/fence/test/e2e/internal/oplog"
)

// Settings of the nemesis test.
const (
	contenders  = 12               // concurrent `fence run` loops
	runFor      = 30 * time.Second // how long the nemesis injects faults
	maxRun      = 40 * time.Second // how long the contenders may run to reach minOps
	minOps      = 500              // operations the history must hold
	maxIncr     = 80               // each holder increments 1..maxIncr times
	ttl         = "2s"             // the holders' --ttl
	checkBudget = 60 * time.Second // porcupine's time limit (a hang guard)
)

// TestNemesisCounter runs 12 contenders, each starting `fence run counter
// --ttl 2s -- e2ehelper incr` over and over for 30 s on the etcd backend,
// every holder doing fenced read-modify-write increments of a counter in
// PostgreSQL (see history_test.go for the protocol and why it loses no
// increment), while a nemesis, every 0.3 to 1 s, hits a random holder:
// every other time it freezes the whole tree (SIGSTOP) past the TTL and lets
// the stale command write while the successor sits between its read and
// its first write (see staleWrite); otherwise it freezes the whole tree for 2 to 3.5 s (the
// command resuming first, racing with the successor's claim, read and
// write), fence alone or the command alone for 2.5 to 4 s, or SIGKILLs
// fence, the watchdog or the command. Every operation is logged by the process that ran it;
// the merged history must pass checks (i) to (iii) of history_test.go.
func TestNemesisCounter(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("the nemesis test runs for about 35 s")
	}
	pg := pgtest.Start(t)
	dbName := pg.CreateDatabase(t)
	db := pg.Open(t, dbName)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if _, err := db.ExecContext(ctx, `CREATE TABLE counter (id INT PRIMARY KEY, value BIGINT NOT NULL, fence BIGINT NOT NULL DEFAULT 0, holder TEXT);
		INSERT INTO counter (id, value) VALUES (1, 0)`); err != nil {
		t.Fatal(err)
	}
	be := etcdBackend(t)
	dir := t.TempDir()
	logDir, stopFile := filepath.Join(dir, "logs"), filepath.Join(dir, "stop")
	if err := os.Mkdir(logDir, 0o755); err != nil {
		t.Fatal(err)
	}
	env := append(append([]string{}, be.env...), "E2E_PG_DSN="+pg.DSN(dbName), "E2E_LOG_DIR="+logDir,
		"E2E_STOP="+stopFile, "E2E_MAX="+strconv.Itoa(maxIncr))

	seed := uint64(time.Now().UnixNano())
	if s, err := strconv.ParseUint(os.Getenv("E2E_SEED"), 10, 64); err == nil {
		seed = s
	}
	t.Logf("nemesis seed %d (E2E_SEED reproduces the schedule of faults, not the timing)", seed)

	reg := &registry{procs: map[*fenceProc]int{}}
	start := time.Now()
	end := start.Add(runFor)
	var running atomic.Bool // contenders start new runs
	running.Store(true)
	runCtx, stopRun := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { // on an early failure: no new run, and none left behind
		stopRun()
		reg.killAll()
		wg.Wait()
	}()
	codes := map[int]int{}
	var codesMu sync.Mutex
	var oddOutput []string
	for c := range contenders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cenv := append(slices.Clone(env), "E2E_CLIENT="+strconv.Itoa(c))
			for running.Load() && runCtx.Err() == nil {
				p, err := spawnFence(cenv, "run", "counter", "--ttl", ttl, "--", helperBin, "incr")
				if err != nil {
					t.Error(err)
					return
				}
				reg.add(p, c)
				<-p.done
				reg.remove(p)
				codesMu.Lock()
				codes[p.code]++
				if !expectedCode(p.code, p.stderr.String()) && len(oddOutput) < 5 {
					oddOutput = append(oddOutput, fmt.Sprintf("exit %d: %s", p.code, p.stderr))
				}
				codesMu.Unlock()
			}
		}()
	}

	nem := &nemesis{rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), reg: reg, logDir: logDir,
		superseded: func(tok uint64) bool {
			var fence uint64
			err := db.QueryRowContext(ctx, `SELECT fence FROM counter WHERE id = 1`).Scan(&fence)
			return err == nil && fence > tok
		}}
	nem.run(runCtx, end)
	// On a slow machine, go on without faults until the history is long
	// enough, up to maxRun.
	for time.Since(start) < maxRun && countCalls(logDir) < minOps {
		time.Sleep(200 * time.Millisecond)
	}
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
	elapsed := time.Since(start)

	// Every statement has ended once no helper's connection is left.
	for deadline := time.Now().Add(hangGuard); ; time.Sleep(20 * time.Millisecond) {
		var n int
		if err := db.QueryRowContext(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d connections to the counter's database are still open", n)
		}
	}
	h, final, torn := counterRun(ctx, t, db, logDir)

	var anomalies []string
	checkStart := time.Now()
	for _, m := range []struct {
		name   string
		atomic bool
	}{{"atomic fenced counter", true}, {"fenced register", false}} {
		if why := linearizable(h, counterModel(m.atomic), checkBudget, os.TempDir()); why != "" { // kept: evidence
			anomalies = append(anomalies, "(i) against the "+m.name+" model: "+why)
		}
	}
	checkTime := time.Since(checkStart)
	anomalies = append(anomalies, prefix("(ii) ", tokenOrderAnomalies(h))...)
	tookEffect, a3 := counterAnomalies(h, final)
	anomalies = append(anomalies, prefix("(iii) ", a3)...)
	if torn > 0 {
		anomalies = append(anomalies, fmt.Sprintf("%d torn log lines", torn))
	}

	stops, kills := nem.counts()
	t.Logf("nemesis ops=%d accepted=%d refused=%d unknown=%d stops=%d kills=%d anomalies=%d",
		len(h.ops), h.accepted, h.refused, h.unknown, stops, kills, len(anomalies))
	t.Logf("increments accepted=%d refused=%d unknown=%d (took effect: %d); claims=%d reads=%d; final value %d fence %d; "+
		"%d holders; fence exit codes %v; nemesis %v; ran %v, porcupine %v",
		h.incrOK, h.incrStale, h.incrUnknown, tookEffect, h.claims, h.reads, final.Value, final.Fence,
		h.claims, codes, nem.byAction(), elapsed.Round(time.Millisecond), checkTime.Round(time.Millisecond))
	if os.Getenv("E2E_VERBOSE") != "" {
		for _, s := range nem.notes {
			t.Log(s)
		}
	}
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
	// The run must have exercised what it claims to check.
	if len(h.ops) < minOps {
		t.Errorf("only %d operations, want at least %d", len(h.ops), minOps)
	}
	if stops == 0 || kills == 0 {
		t.Errorf("the nemesis froze %d and killed %d holders, want both", stops, kills)
	}
	if h.refused == 0 {
		t.Errorf("no write was refused as stale: the nemesis never got a stale holder's write to the database")
	}
	if len(a3) == 0 && int64(h.incrOK+tookEffect) != final.Value {
		t.Errorf("final value %d, accepted increments %d + unknown ones that took effect %d", final.Value, h.incrOK, tookEffect)
	}
}

// countCalls counts the operations logged so far.
func countCalls(dir string) int {
	recs, _, err := oplog.ReadDir(dir)
	if err != nil {
		return 0
	}
	n := 0
	for _, r := range recs {
		if r.Phase == oplog.Call {
			n++
		}
	}
	return n
}

func prefix(p string, ss []string) []string {
	for i := range ss {
		ss[i] = p + ss[i]
	}
	return ss
}

// expectedCode: the exit codes of `fence run` that the faults explain: 0,
// 76 (lease lost: frozen past the TTL), 77 (the command's write was
// refused), 137 (the command was SIGKILLed), -1 (fence was SIGKILLed), 125
// when the watchdog was SIGKILLed.
func expectedCode(code int, out string) bool {
	switch code {
	case 0, 76, 77, 137, -1:
		return true
	case 125:
		return strings.Contains(out, "watchdog process ended unexpectedly (signal: killed)")
	}
	return false
}

// staleWrite freezes holder A's whole tree until a successor B has claimed
// the counter and read it (so past A's TTL: etcd granted B the lock only
// when A's lease had expired), then freezes B's command between its read
// and its first write (B thinks 20 to 60 ms there), resumes A's command
// alone until it has tried a write (its watchdog and fence stay frozen, so
// nothing stops it), then resumes B's command, and A's watchdog and fence.
// With the claim, A's write is refused and B's builds on the value it read;
// a holder that did not claim before reading would lose A's increment here.
// When B cannot be caught in that window, A resumes after B's writes, which
// also makes its writes stale. It reports whether it froze A.
func (n *nemesis) staleWrite(a holderTree) bool {
	tokA := tokenOf(a.command.PID)
	if tokA == 0 {
		return false
	}
	if err := a.freeze(); err != nil {
		thawTree(a)
		return false
	}
	defer thawTree(a)
	var b proc.ID
	t0 := time.Now()
	for time.Since(t0) < 8*time.Second {
		if pid, ok := n.successorRead(tokA); ok {
			if st, err := proc.ReadStat(pid); err == nil && !st.Gone() {
				b = st.ID()
				if k, _ := signalGroup(b, syscall.SIGSTOP); k == 0 {
					b = proc.ID{}
				}
			}
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if b == (proc.ID{}) {
		for time.Since(t0) < 8*time.Second && !n.superseded(tokA) {
			time.Sleep(20 * time.Millisecond)
		}
	}
	before := countCalls(n.logDir)
	_, _ = signalGroup(a.command, syscall.SIGCONT)
	// A's next write, or its exit, shows as a new record in some log.
	for t1 := time.Now(); time.Since(t1) < time.Second && countCalls(n.logDir) == before; {
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond)
	n.note("stale-write: A token %d, B %v caught after its read: %v, frozen %v", tokA, b.PID, b != proc.ID{}, time.Since(t0).Round(time.Millisecond))
	if b != (proc.ID{}) {
		n.count("stale-write-between-read-and-write")
		_, _ = signalGroup(b, syscall.SIGCONT)
	}
	time.Sleep(300 * time.Millisecond)
	return true
}

// successorRead returns the PID of a holder with a token larger than tok
// whose log shows its first read returned and no write of an increment yet.
func (n *nemesis) successorRead(tok uint64) (int, bool) {
	paths, _ := filepath.Glob(filepath.Join(n.logDir, "*.jsonl"))
	for _, p := range paths {
		var client, pid int
		var t uint64
		if _, err := fmt.Sscanf(filepath.Base(p), "c%d-p%d-t%d.jsonl", &client, &pid, &t); err != nil || t <= tok {
			continue
		}
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		read := false
		for _, line := range bytes.Split(b, []byte("\n")) {
			var r oplog.Record
			if json.Unmarshal(line, &r) != nil {
				continue
			}
			if r.Kind == oplog.Incr {
				return 0, false // too late: it writes already
			}
			if r.Kind == oplog.Read && r.Phase == oplog.Ret && r.Result == oplog.OK {
				read = true
			}
		}
		if read {
			return pid, true
		}
	}
	return 0, false
}

// thawTree resumes a tree frozen by the nemesis: the command's group first.
func thawTree(h holderTree) {
	_, _ = signalGroup(h.command, syscall.SIGCONT)
	_ = signalID(h.watchdog, syscall.SIGCONT)
	_ = signalID(h.fence, syscall.SIGCONT)
}

// tokenOf reads FENCE_TOKEN from the environment of process pid (0 when it
// cannot).
func tokenOf(pid int) uint64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	if err != nil {
		return 0
	}
	for _, kv := range bytes.Split(b, []byte{0}) {
		if v, ok := bytes.CutPrefix(kv, []byte("FENCE_TOKEN=")); ok {
			tok, _ := strconv.ParseUint(string(v), 10, 64)
			return tok
		}
	}
	return 0
}

// registry is the set of running fence processes.
type registry struct {
	mu    sync.Mutex
	procs map[*fenceProc]int
}

func (r *registry) add(p *fenceProc, client int) {
	r.mu.Lock()
	r.procs[p] = client
	r.mu.Unlock()
}

func (r *registry) remove(p *fenceProc) {
	r.mu.Lock()
	delete(r.procs, p)
	r.mu.Unlock()
}

func (r *registry) list() []*fenceProc {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]*fenceProc, 0, len(r.procs))
	for p := range r.procs {
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b *fenceProc) int { return a.cmd.Process.Pid - b.cmd.Process.Pid })
	return out
}

func (r *registry) killAll() {
	for _, p := range r.list() {
		p.kill()
	}
}

// holders returns the trees of the fence processes whose command runs,
// from one snapshot of /proc.
func (r *registry) holders() []holderTree {
	ds, err := proc.Descendants(os.Getpid())
	if err != nil {
		return nil
	}
	byPID := map[int]proc.Stat{}
	for _, d := range ds {
		byPID[d.PID] = d
	}
	var out []holderTree
	for _, p := range r.list() {
		f, ok := byPID[p.cmd.Process.Pid]
		if !ok || f.Gone() || p.exited() {
			continue
		}
		for _, c := range ds { // the command: a grandchild of fence leading its own group
			w, ok := byPID[c.PPID]
			if ok && w.PPID == f.PID && c.PGID == c.PID && !c.Gone() && !w.Gone() {
				out = append(out, holderTree{fence: f.ID(), watchdog: w.ID(), command: c.ID()})
			}
		}
	}
	return out
}

// nemesis injects process faults into holders.
type nemesis struct {
	rng *rand.Rand
	reg *registry
	// superseded reports whether the counter's fence is larger than tok.
	superseded func(tok uint64) bool
	logDir     string           // the holders' operation logs
	hit        map[proc.ID]bool // fence processes that got a fault (run's goroutine only)

	mu    sync.Mutex
	stats map[string]int
	notes []string
}

// The faults: every other one is the first, the others are drawn by
// weight.
// fault is one kind of fault: stop tells a freeze from a kill.
type fault struct {
	name   string
	weight int
	stop   bool
}

var faults = []fault{
	{"stale-write", 0, true},       // see staleWrite
	{"freeze-all-racing", 2, true}, // the whole tree for 2 to 3.5 s; the command resumes 300ms before the rest
	{"freeze-fence", 1, true},      // fence alone: the watchdog must stop the command
	{"freeze-command", 1, true},    // the command alone: fence keeps the lease, the holder stalls
	{"kill-fence", 2, false},       // the watchdog stops the command; the lease expires
	{"kill-watchdog", 1, false},    // the command dies with it (parent-death signal)
	{"kill-command", 2, false},     // fence exits 137 and releases
}

func (n *nemesis) note(format string, args ...any) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.notes = append(n.notes, fmt.Sprintf(format, args...))
}

func (n *nemesis) count(name string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.stats == nil {
		n.stats = map[string]int{}
	}
	n.stats[name]++
}

func (n *nemesis) counts() (stops, kills int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, f := range faults {
		if f.stop {
			stops += n.stats[f.name]
		} else {
			kills += n.stats[f.name]
		}
	}
	return
}

func (n *nemesis) byAction() map[string]int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return maps.Clone(n.stats)
}

// between is a random duration in [lo, hi).
func (n *nemesis) between(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(n.rng.Int64N(int64(hi-lo)))
}

// run injects faults until end: a random pause, then a fault on a random
// holder (never one that got a fault already), applied concurrently with
// the next ones. Whatever it freezes it
// thaws before it returns.
func (n *nemesis) run(ctx context.Context, end time.Time) {
	injected := 0
	var wg sync.WaitGroup
	defer wg.Wait()
	n.hit = map[proc.ID]bool{}
	for {
		time.Sleep(n.between(300*time.Millisecond, 1000*time.Millisecond))
		if time.Now().After(end) || ctx.Err() != nil {
			return
		}
		// Each fence run gets at most one fault: a frozen holder is often
		// the only one, and would otherwise draw the next faults too.
		hs := slices.DeleteFunc(n.reg.holders(), func(h holderTree) bool { return n.hit[h.fence] })
		if len(hs) == 0 {
			n.count("no-holder")
			continue
		}
		h := hs[n.rng.IntN(len(hs))]
		n.hit[h.fence] = true
		// Every other fault is the stale-writer scenario (faults[0]), so
		// that each run has several; the others are, in turn, a freeze
		// and a kill, each drawn by weight among its kind, so that every
		// run has both (drawn by weight among all, six draws have no kill
		// in about one run in 130, (4/9)^6, and CI had such a run).
		f := faults[0]
		if injected%2 == 1 {
			kill := (injected/2)%2 == 0
			kind := slices.DeleteFunc(slices.Clone(faults[1:]), func(ff fault) bool { return ff.stop == kill })
			total := 0
			for _, ff := range kind {
				total += ff.weight
			}
			w := n.rng.IntN(total)
			for _, ff := range kind {
				if f = ff; w < ff.weight {
					break
				}
				w -= ff.weight
			}
		}
		injected++
		freezeFor := n.between(2500*time.Millisecond, 4*time.Second) // TTL 2s: the lease expires meanwhile
		wg.Add(1)
		go func() { // faults overlap: a freeze lasts seconds
			defer wg.Done()
			if n.inject(f.name, h, freezeFor) {
				n.count(f.name)
			} else {
				n.count("missed")
			}
		}()
	}
}

// inject applies one fault to h and reports whether it hit a live process.
func (n *nemesis) inject(name string, h holderTree, freezeFor time.Duration) bool {
	switch name {
	case "stale-write":
		return n.staleWrite(h)
	case "freeze-all-racing":
		// Frozen about as long as it takes a successor to get the lock, so
		// that the command resumes while the successor claims, reads and
		// writes: its writes race with the successor's.
		err := h.freeze()
		time.Sleep(freezeFor - 500*time.Millisecond)
		_, _ = signalGroup(h.command, syscall.SIGCONT)
		time.Sleep(300 * time.Millisecond)
		_ = signalID(h.watchdog, syscall.SIGCONT)
		_ = signalID(h.fence, syscall.SIGCONT)
		return err == nil
	case "freeze-fence":
		err := signalID(h.fence, syscall.SIGSTOP)
		time.Sleep(freezeFor)
		_ = signalID(h.fence, syscall.SIGCONT)
		return err == nil
	case "freeze-command":
		k, _ := signalGroup(h.command, syscall.SIGSTOP)
		time.Sleep(freezeFor)
		_, _ = signalGroup(h.command, syscall.SIGCONT)
		return k > 0
	case "kill-fence":
		return signalID(h.fence, syscall.SIGKILL) == nil
	case "kill-watchdog":
		return signalID(h.watchdog, syscall.SIGKILL) == nil
	case "kill-command":
		return signalID(h.command, syscall.SIGKILL) == nil
	}
	panic("unknown fault " + name)
}
