package e2e

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fence-dev/fence/internal/proc"
)

// The --once tests: cron firing the same job on several hosts. Each "host"
// is a fence process with a --holder of its own; they share one etcd or one
// local state directory.

// record is one entry of `fence once list -o json`.
type record struct {
	Key      string  `json:"key"`
	Holder   string  `json:"holder"`
	Token    uint64  `json:"token"`
	Started  string  `json:"started"`
	Finished string  `json:"finished"`
	Duration float64 `json:"duration"`
}

func onceList(t *testing.T, env []string, lock string) []record {
	t.Helper()
	out, code := fence(t, env, "once", "list", lock, "-o", "json")
	if code != 0 {
		t.Fatalf("fence once list %s: exit %d: %s", lock, code, out)
	}
	var recs []record
	if err := json.Unmarshal([]byte(out), &recs); err != nil {
		t.Fatalf("fence once list -o json: %v\n%s", err, out)
	}
	return recs
}

// runsIn reads the lines the job appended to path: "holder token" each.
func runsIn(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Fields(strings.ReplaceAll(strings.TrimSpace(string(b)), " ", "@"))
}

// awayFromDayBoundary waits, when the UTC day ends within margin, until it
// has begun: --once-per 24h hosts must all fire within one day.
func awayFromDayBoundary(margin time.Duration) {
	now := time.Now().UTC()
	next := now.Truncate(24 * time.Hour).Add(24 * time.Hour)
	if next.Sub(now) < margin {
		time.Sleep(next.Sub(now) + time.Second)
	}
}

// threeHosts fires the job on three hosts whose cron fires 0, 1.5 and 4 s
// apart, each `fence run -q [--holder hostN] args -- job`, where the job
// records its run and lasts 2 s. It returns the runs and each host's exit
// code and output.
func threeHosts(t *testing.T, env []string, lock string, args ...string) (runs []string, codes []int, outs []string) {
	runsFile := filepath.Join(t.TempDir(), "runs")
	skews := []time.Duration{0, 1500 * time.Millisecond, 4 * time.Second}
	codes, outs = make([]int, 3), make([]string, 3)
	var wg sync.WaitGroup
	start := time.Now()
	for i, skew := range skews {
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(time.Until(start.Add(skew)))
			a := append([]string{"-q", "--holder", fmt.Sprintf("host%d", i+1), "run", lock}, args...)
			a = append(a, "--", "sh", "-c", `echo "$FENCE_HOLDER $FENCE_TOKEN" >> "$0"; sleep 2`, runsFile)
			p, err := spawnFence(env, a...)
			if err != nil {
				t.Error(err)
				return
			}
			codes[i], outs[i] = p.wait(t)
		}()
	}
	wg.Wait()
	return runsIn(t, runsFile), codes, outs
}

// TestOnceThreeHosts: three hosts fire a 2 s nightly job 0, 1.5 and 4 s
// apart against one etcd and one local state directory. Plain `fence run`
// runs it twice with -n and three times without (one after another); with
// --once-per 24h it runs exactly once, with and without -n, the hosts that
// skipped exit 0 and, with -q, print nothing, and the one completion record
// carries the runner's token.
func TestOnceThreeHosts(t *testing.T) {
	awayFromDayBoundary(30 * time.Second)
	for _, be := range []backend{localBackend(t), etcdBackend(t)} {
		for _, mode := range []struct {
			name string
			args []string
		}{
			{"no-wait", []string{"-n", "--conflict-exit-code", "0"}},
			{"wait", nil},
		} {
			t.Run(be.name+"/"+mode.name, func(t *testing.T) {
				t.Parallel()
				before, _, _ := threeHosts(t, be.env, "plain-"+mode.name, mode.args...)
				t.Logf("plain fence run %v: %d runs: %v", mode.args, len(before), before)
				if len(before) < 2 {
					t.Errorf("plain fence run ran the job %d times; the three hosts were meant to run it more than once without --once", len(before))
				}

				lock := "nightly-" + mode.name
				runs, codes, outs := threeHosts(t, be.env, lock, append([]string{"--once-per", "24h"}, mode.args...)...)
				t.Logf("--once-per 24h %v: %d runs: %v", mode.args, len(runs), runs)
				if len(runs) != 1 {
					t.Fatalf("with --once-per the job ran %d times, want exactly once: %v", len(runs), runs)
				}
				for i := range codes {
					if codes[i] != 0 || outs[i] != "" {
						t.Errorf("host%d: exit %d, output %q; want 0 and nothing (-q)", i+1, codes[i], outs[i])
					}
				}
				recs := onceList(t, be.env, lock)
				holder, token, _ := strings.Cut(runs[0], "@")
				if len(recs) != 1 || recs[0].Holder != holder || strconv.FormatUint(recs[0].Token, 10) != token ||
					recs[0].Key != time.Now().UTC().Truncate(24*time.Hour).Format(time.RFC3339) {
					t.Fatalf("completion records %+v; want one, today's, of %s (token %s)", recs, holder, token)
				}
				if recs[0].Duration < 2 {
					t.Errorf("recorded duration %vs, want the job's 2s at least", recs[0].Duration)
				}
			})
		}
	}
}

// TestOnceFailedRunLeavesNoRecord: a first run that fails leaves no record,
// so the next host runs the job; after its success nobody runs it again.
func TestOnceFailedRunLeavesNoRecord(t *testing.T) {
	for _, be := range []backend{localBackend(t), etcdBackend(t)} {
		t.Run(be.name, func(t *testing.T) {
			t.Parallel()
			marker := filepath.Join(t.TempDir(), "ran")
			out, code := fence(t, be.env, "--holder", "host1", "run", "job", "--once", "k", "--", "sh", "-c", "exit 3")
			if code != 3 {
				t.Fatalf("failing run: exit %d, %s; want the command's 3", code, out)
			}
			if recs := onceList(t, be.env, "job"); len(recs) != 0 {
				t.Fatalf("a failed run left completion records: %+v", recs)
			}
			out, code = fence(t, be.env, "--holder", "host2", "run", "job", "--once", "k", "--", "touch", marker)
			if _, err := os.Stat(marker); code != 0 || err != nil {
				t.Fatalf("the run after a failed one: exit %d, %s; ran: %v", code, out, err)
			}
			recs := onceList(t, be.env, "job")
			if len(recs) != 1 || recs[0].Holder != "host2" {
				t.Fatalf("records %+v; want one, of host2", recs)
			}
			os.Remove(marker)
			for _, h := range []string{"host3", "host1"} {
				out, code = fence(t, be.env, "-q", "--holder", h, "run", "job", "--once", "k", "--", "touch", marker)
				if _, err := os.Stat(marker); code != 0 || out != "" || err == nil {
					t.Fatalf("%s after the success: exit %d, output %q, ran %v; want 0, nothing, not run", h, code, out, err == nil)
				}
			}
			// Without -q the skip says why, on one line; --done-exit-code
			// changes the code.
			out, code = fence(t, be.env, "run", "job", "--once", "k", "--done-exit-code", "3", "--", "touch", marker)
			if code != 3 || strings.Count(out, "\n") != 1 || !strings.Contains(out, `"job" is done for key "k"`) {
				t.Fatalf("skip with --done-exit-code 3: exit %d, output %q", code, out)
			}
		})
	}
}

// TestOnceFrozenHolderCannotRecord: a holder frozen (fence and its
// watchdog) past its TTL, whose command then finishes, cannot record the
// completion: it exits 76; the successor runs and records; exactly one
// record, carrying the successor's token. The successor is still running
// when the frozen holder resumes, so a holder that recorded without the
// lease would get there first.
func TestOnceFrozenHolderCannotRecord(t *testing.T) {
	for _, be := range []backend{localBackend(t), etcdBackend(t)} {
		t.Run(be.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			pidFile, bStarted := filepath.Join(dir, "a.pid"), filepath.Join(dir, "b.token")
			a := startFence(t, be.env, "--holder", "frozen", "run", "--ttl", "2s", "job", "--once", "k", "--",
				"sh", "-c", `echo $$ > "$0.tmp"; mv "$0.tmp" "$0"; sleep 2.5`, pidFile)
			leader := waitLeader(t, pidFile)
			tree, err := treeOf(a.cmd.Process.Pid, leader.PID)
			if err != nil {
				t.Fatal(err)
			}
			for _, id := range []proc.ID{tree.watchdog, tree.fence} {
				if err := signalID(id, syscall.SIGSTOP); err != nil {
					t.Fatal(err)
				}
			}
			if err := waitStopped(tree.watchdog, tree.fence); err != nil {
				t.Fatal(err)
			}
			frozen := time.Now()
			b := startFence(t, be.env, "--holder", "successor", "run", "--ttl", "10s", "job", "--once", "k", "--",
				"sh", "-c", `echo $FENCE_TOKEN > "$0.tmp"; mv "$0.tmp" "$0"; sleep 4`, bStarted)
			var tokB uint64
			for end := time.Now().Add(hangGuard); ; time.Sleep(20 * time.Millisecond) {
				if s, err := os.ReadFile(bStarted); err == nil {
					tokB, _ = strconv.ParseUint(strings.TrimSpace(string(s)), 10, 64)
					break
				}
				if time.Now().After(end) || b.exited() {
					t.Fatalf("the successor did not start its command; output: %s", b.stderr)
				}
			}
			// Past the command's own 2.5 s (on etcd nobody stops it): it has
			// finished with 0 while its supervisors were frozen.
			time.Sleep(time.Until(frozen.Add(3 * time.Second)))
			for _, id := range []proc.ID{tree.fence, tree.watchdog} {
				_ = signalID(id, syscall.SIGCONT)
			}
			codeA, outA := a.wait(t)
			t.Logf("frozen holder resumed: exit %d: %s", codeA, strings.TrimSpace(outA))
			if codeA != 76 {
				t.Fatalf("the frozen holder exited %d, want 76: %s", codeA, outA)
			}
			if recs := onceList(t, be.env, "job"); len(recs) != 0 {
				t.Fatalf("records while the successor still runs: %+v; the frozen holder recorded without its lease", recs)
			}
			if codeB, outB := b.wait(t); codeB != 0 {
				t.Fatalf("successor: exit %d: %s", codeB, outB)
			}
			recs := onceList(t, be.env, "job")
			if len(recs) != 1 || recs[0].Token != tokB || recs[0].Holder != "successor" {
				t.Fatalf("records %+v; want exactly one, of the successor's token %d", recs, tokB)
			}
		})
	}
}

// TestOnceKilledRecordsWholeOrAbsent: fence run --once killed with SIGKILL
// at random points of 200 runs (each on a lock of its own, so that a killed
// holder's lease never makes the next run wait): every record is whole (it
// reads back, with its key, holder and token) or absent, never partial; a
// key with a record is skipped by the next run, one without is run.
func TestOnceKilledRecordsWholeOrAbsent(t *testing.T) {
	for _, be := range []backend{localBackend(t), etcdBackend(t)} {
		t.Run(be.name, func(t *testing.T) {
			// The length of a whole run sets the range of the kill points.
			t0 := time.Now()
			for i := range 3 {
				if out, code := fence(t, be.env, "run", fmt.Sprint("calib-", i), "--once", "k", "--", "true"); code != 0 {
					t.Fatalf("calibration run: exit %d: %s", code, out)
				}
			}
			whole := time.Since(t0) / 3
			const runs = 200
			lock := func(i int) string { return fmt.Sprintf("killed-%03d", i) }
			for i := range runs {
				p, err := spawnFence(be.env, "--holder", "h", "run", lock(i), "--once", "k", "--", "true")
				if err != nil {
					t.Fatal(err)
				}
				time.Sleep(time.Duration(rand.Int64N(int64(whole * 5 / 4))))
				p.kill()
			}
			var have []bool
			n := 0
			for i := range runs {
				recs := onceList(t, be.env, lock(i)) // fails on a corrupt record
				for _, r := range recs {
					if r.Key != "k" || r.Holder != "h" || r.Token == 0 || r.Finished == "" {
						t.Errorf("%s: partial record %+v", lock(i), r)
					}
				}
				if len(recs) > 1 {
					t.Errorf("%s: %d records of one key", lock(i), len(recs))
				}
				have = append(have, len(recs) == 1)
				if len(recs) == 1 {
					n++
				}
			}
			t.Logf("%d kill points within %v (a whole run): %d records whole, %d absent, none partial", runs, (whole * 5 / 4).Round(time.Millisecond), n, runs-n)
			if be.name == "local" {
				checkRecordFiles(t, be)
			}
			// A few recorded keys and a few absent ones: skipped, run.
			checked := map[bool]int{}
			for i := range runs {
				if checked[have[i]] >= 3 {
					continue
				}
				checked[have[i]]++
				marker := filepath.Join(t.TempDir(), "ran")
				if out, code := fence(t, be.env, "run", lock(i), "--once", "k", "--", "touch", marker); code != 0 {
					t.Fatalf("run of %s after the kills: exit %d: %s", lock(i), code, out)
				}
				_, err := os.Stat(marker)
				if ran := err == nil; ran == have[i] {
					t.Errorf("%s: recorded %v, ran again %v", lock(i), have[i], ran)
				}
			}
		})
	}
}

// checkRecordFiles reads every local record file directly: each is one
// whole JSON record (written through a rename); temporary files of killed
// writers are never read as records.
func checkRecordFiles(t *testing.T, be backend) {
	t.Helper()
	var dir string
	for _, kv := range be.env {
		if v, ok := strings.CutPrefix(kv, "FENCE_STATE_DIR="); ok {
			dir = filepath.Join(v, "once")
		}
	}
	files, err := filepath.Glob(filepath.Join(dir, "*", "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no record files under %s (%v)", dir, err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var r record
		if err := json.Unmarshal(b, &r); err != nil || r.Token == 0 {
			t.Errorf("record file %s is partial: %q", f, b)
		}
	}
}
