// Package cluster runs fence against three-member etcd clusters of separate
// server processes (Debian's etcd 3.4 and etcd 3.7.3 built by
// test/cluster/tools), with real SIGSTOP, SIGKILL and partitions through
// fault proxies, and checks in every scenario that no two commands ever
// overlap, that tokens only grow, and what the scenario promises.
//
// The tests run only with FENCE_CLUSTER_TESTS=1 (.ci/run sets it for one
// step of its own, about 5 minutes): there each kind of single-member fault
// runs once at --ttl 3s (3 s stalls) and the stalled stream member at 15s,
// the leader's SIGKILL at 3s, and a whole-cluster stall of 8 s.
// FENCE_CLUSTER_TRIALS=N (N > 1) or FENCE_CLUSTER_FULL=1 runs the whole
// matrix: every kind at 3s and 15s with 6 s stalls, N times each, the
// leader's SIGKILL at both TTLs, a 20 s whole-cluster stall. The full run
// of the issue (about 2.6 hours on 2 idle cores: 2 trials took 15.5 minutes):
//
//	FENCE_CLUSTER_TESTS=1 FENCE_CLUSTER_TRIALS=20 go test ./test/cluster -timeout 8h -v
//
// Each test prints, at the end, the table of scenario × etcd version × TTL:
// trials, kills, overlaps, leases etcd itself revoked (etcd#15247; in
// brackets, those after which the next holder started before the old
// command had stopped: etcd handed the lock on, only tokens guard), stops
// while the cluster had no leader to renew with (leaderless: no majority
// named one for 0.6 s straight in the renewal window, as a LeaderWatch saw
// it), the margin before the lease could expire, and the waiter's latency.
//
// etcd 3.7.3 is skipped when its binary is missing, unless
// FENCE_REQUIRE_ETCD37=1.
package cluster

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fence-dev/fence/internal/etcdproc"
)

var fenceBin string

func TestMain(m *testing.M) {
	if os.Getenv("FENCE_CLUSTER_TESTS") != "1" {
		fmt.Println("test/cluster: skipped (set FENCE_CLUSTER_TESTS=1)")
		os.Exit(0)
	}
	dir, err := os.MkdirTemp("", "fence-cluster-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fenceBin = filepath.Join(dir, "fence")
	gotool := "/usr/local/go/bin/go"
	if p, err := exec.LookPath("go"); err == nil {
		gotool = p
	}
	if out, err := exec.Command(gotool, "build", "-o", fenceBin, "github.com/fence-dev/fence/cmd/fence").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "go build fence: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	printTable()
	os.RemoveAll(dir)
	os.Exit(code)
}

// versions are the etcd servers the scenarios run on.
func versions(t *testing.T) map[string]string {
	v := map[string]string{"3.4": etcdproc.Binary()}
	bin := etcdproc.Etcd37Binary()
	if _, err := os.Stat(bin); err == nil {
		v["3.7"] = bin
	} else if os.Getenv("FENCE_REQUIRE_ETCD37") == "1" {
		t.Fatalf("etcd 3.7.3 binary %s: %v (cd test/cluster/tools && go build -o %s go.etcd.io/etcd/server/v3)", bin, err, bin)
	} else {
		t.Logf("etcd 3.7.3 not found at %s: only Debian's etcd", bin)
	}
	return v
}

// fullRun is the run of the whole matrix (FENCE_CLUSTER_TRIALS > 1
// or FENCE_CLUSTER_FULL=1); CI runs a part of it (see each test).
func fullRun() bool { return trials() > 1 || os.Getenv("FENCE_CLUSTER_FULL") == "1" }

func trials() int {
	if n, err := strconv.Atoi(os.Getenv("FENCE_CLUSTER_TRIALS")); err == nil && n > 0 {
		return n
	}
	return 1
}

// A run is one `fence run` started by a test.
type run struct {
	name  string
	cmd   *exec.Cmd
	outMu sync.Mutex
	out   strings.Builder // fence's stdout and stderr, each line with the time it came
	done  chan struct{}
	code  int
	end   time.Time // when fence exited
	stop  time.Time // when fence said it was stopping the command (outMu)
}

// start runs `fence run LOCK ARGS... -- sh -c SCRIPT`, where SCRIPT logs
// "start TOKEN NS" and "end TOKEN NS" (NS: Unix nanoseconds) to log around
// sleeping for work.
func start(t *testing.T, c *etcdproc.Cluster, name, lock, log string, work time.Duration, args ...string) *run {
	t.Helper()
	// A stopped command logs its end in its TERM trap (sleep, in the same
	// process group, gets the signal too); one killed by SIGKILL has no end
	// line and counts as running until its fence exited.
	script := fmt.Sprintf(`trap 'echo "end $FENCE_TOKEN $(date +%%s%%N) %[1]s" >> %[2]s; exit 143' TERM; echo "start $FENCE_TOKEN $(date +%%s%%N) %[1]s" >> %[2]s; sleep %[3]s & wait $!; echo "end $FENCE_TOKEN $(date +%%s%%N) %[1]s" >> %[2]s`,
		name, log, strconv.FormatFloat(work.Seconds(), 'f', 3, 64))
	argv := append([]string{"run", lock, "-v", "--endpoints", strings.Join(c.Endpoints(), ","), "--holder", name}, args...)
	argv = append(argv, "--", "sh", "-c", script)
	r := &run{name: name, cmd: exec.Command(fenceBin, argv...), done: make(chan struct{})}
	r.cmd.Stdout, r.cmd.Stderr = stamped{r}, stamped{r}
	r.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if os.Getenv("FENCE_CLUSTER_DUMP") != "" {
		r.cmd.Env = append(os.Environ(), "GOTRACEBACK=all")
	}
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		err := r.cmd.Wait()
		r.end = time.Now()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			r.code = ee.ExitCode()
		} else if err != nil {
			r.code = -1
		}
		close(r.done)
	}()
	t.Cleanup(func() {
		r.cmd.Process.Kill()
		<-r.done
	})
	return r
}

// stamped writes into a run's out, each line with the time it came.
type stamped struct{ r *run }

func (s stamped) Write(p []byte) (int, error) {
	s.r.outMu.Lock()
	defer s.r.outMu.Unlock()
	for _, line := range strings.SplitAfter(string(p), "\n") {
		if line == "" {
			continue
		}
		if o := s.r.out.String(); o == "" || strings.HasSuffix(o, "\n") {
			now := time.Now()
			s.r.out.WriteString(now.Format("15:04:05.000 "))
			if s.r.stop.IsZero() && strings.Contains(line, "fence: stopping the command") {
				s.r.stop = now
			}
		}
		s.r.out.WriteString(line)
	}
	return len(p), nil
}

// output is what fence wrote so far.
func (r *run) output() string {
	r.outMu.Lock()
	defer r.outMu.Unlock()
	return r.out.String()
}

// stoppedAt is when fence said it was stopping the command (zero: never).
func (r *run) stoppedAt() time.Time {
	r.outMu.Lock()
	defer r.outMu.Unlock()
	return r.stop
}

// waitFor is wait that reports a run still going as false.
func (r *run) waitFor(within time.Duration) (int, bool) {
	select {
	case <-r.done:
		return r.code, true
	case <-time.After(within):
		return 0, false
	}
}

func (r *run) wait(t *testing.T, within time.Duration) int {
	t.Helper()
	select {
	case <-r.done:
		return r.code
	case <-time.After(within):
		t.Fatalf("%s: fence run did not end within %v\n%s", r.name, within, r.output())
		return 0
	}
}

// An interval is one command's run, from the log.
type interval struct {
	name       string
	token      uint64
	start, end time.Time // end zero: no end line (stopped)
}

// readLog parses the commands' log.
func readLog(t *testing.T, log string) []interval {
	t.Helper()
	f, err := os.Open(log)
	if err != nil {
		if os.IsNotExist(err) {
			return nil
		}
		t.Fatal(err)
	}
	defer f.Close()
	byName := map[string]*interval{}
	var order []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var what, name string
		var tok uint64
		var ns int64
		if _, err := fmt.Sscanf(sc.Text(), "%s %d %d %s", &what, &tok, &ns, &name); err != nil {
			t.Fatalf("log line %q: %v", sc.Text(), err)
		}
		iv := byName[name]
		if iv == nil {
			iv = &interval{name: name, token: tok}
			byName[name] = iv
			order = append(order, name)
		}
		switch what {
		case "start":
			iv.start = time.Unix(0, ns)
		case "end":
			iv.end = time.Unix(0, ns)
		}
	}
	var ivs []interval
	for _, n := range order {
		ivs = append(ivs, *byName[n])
	}
	return ivs
}

// checkLog asserts that no two commands overlapped and that tokens grew in
// the order the commands started. A command with no end line ran at most
// until its fence exited (ends).
func checkLog(t *testing.T, log string, ends map[string]time.Time) []interval {
	t.Helper()
	ivs, overlaps := readChecked(t, log, ends)
	for _, o := range overlaps {
		t.Error(o)
	}
	return ivs
}

// readChecked is checkLog that returns the overlaps instead of failing t
// with them (tokens that do not grow still fail it).
func readChecked(t *testing.T, log string, ends map[string]time.Time) ([]interval, []string) {
	t.Helper()
	ivs := readLog(t, log)
	sort.Slice(ivs, func(i, j int) bool { return ivs[i].start.Before(ivs[j].start) })
	for i := range ivs {
		if ivs[i].end.IsZero() {
			ivs[i].end = ends[ivs[i].name]
		}
	}
	var overlaps []string
	for i := 1; i < len(ivs); i++ {
		a, b := ivs[i-1], ivs[i]
		if b.token <= a.token {
			t.Errorf("tokens went down: %s had %d, then %s got %d", a.name, a.token, b.name, b.token)
		}
		if a.end.IsZero() || b.start.Before(a.end) {
			overlaps = append(overlaps, fmt.Sprintf("OVERLAP: %s (token %d) ran until %v, %s (token %d) started at %v",
				a.name, a.token, a.end.Format("15:04:05.000"), b.name, b.token, b.start.Format("15:04:05.000")))
		}
	}
	return ivs, overlaps
}

// The table the tests print at the end.
var (
	tableMu sync.Mutex
	table   = map[string]*row{}
	rows    []string
)

type row struct {
	trials, kills, overlaps, revoked int
	revokedOverlaps, leaderless      int
	margins, latencies               []time.Duration
}

func record(scenario, version string, ttl time.Duration, killed, overlapped bool, margin, latency time.Duration) {
	tableMu.Lock()
	defer tableMu.Unlock()
	k := fmt.Sprintf("%-38s %-5s %-4v", scenario, version, ttl)
	r := table[k]
	if r == nil {
		r = &row{}
		table[k] = r
		rows = append(rows, k)
	}
	r.trials++
	if killed {
		r.kills++
	}
	if overlapped {
		r.overlaps++
	}
	if margin != 0 {
		r.margins = append(r.margins, margin)
	}
	if latency != 0 {
		r.latencies = append(r.latencies, latency)
	}
}

// recordRevoke counts a trial whose lease etcd itself revoked (etcd#15247),
// and whether the next holder started before the command had stopped.
func recordRevoke(scenario, version string, ttl time.Duration, overlapped bool) {
	tableMu.Lock()
	defer tableMu.Unlock()
	r := table[fmt.Sprintf("%-38s %-5s %-4v", scenario, version, ttl)]
	r.revoked++
	if overlapped {
		r.revokedOverlaps++
	}
}

// recordLeaderless counts a trial whose holder was stopped while the
// cluster had no leader that could renew its lease (see leaderlessStop).
func recordLeaderless(scenario, version string, ttl time.Duration) {
	tableMu.Lock()
	defer tableMu.Unlock()
	table[fmt.Sprintf("%-38s %-5s %-4v", scenario, version, ttl)].leaderless++
}

func span(ds []time.Duration) string {
	if len(ds) == 0 {
		return "-"
	}
	lo, hi := ds[0], ds[0]
	for _, d := range ds {
		lo, hi = min(lo, d), max(hi, d)
	}
	if lo == hi {
		return lo.Round(10 * time.Millisecond).String()
	}
	return lo.Round(10*time.Millisecond).String() + ".." + hi.Round(10*time.Millisecond).String()
}

func printTable() {
	tableMu.Lock()
	defer tableMu.Unlock()
	if len(rows) == 0 {
		return
	}
	fmt.Printf("\n%-38s %-5s %-4s %6s %5s %8s %17s %10s %-14s %s\n", "scenario", "etcd", "ttl", "trials", "kills", "overlaps", "etcd-revoked(ovl)", "leaderless", "margin", "waiter latency")
	for _, k := range rows {
		r := table[k]
		fmt.Printf("%s %6d %5d %8d %17s %10d %-14s %s\n", k, r.trials, r.kills, r.overlaps,
			fmt.Sprintf("%d (%d)", r.revoked, r.revokedOverlaps), r.leaderless, span(r.margins), span(r.latencies))
	}
}
