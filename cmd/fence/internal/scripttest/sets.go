package scripttest

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// inside is the command the set tests run under fence: it logs "in ID
// LOCK..." once fence holds its locks and "out ID LOCK..." before fence
// releases them (O_APPEND: each line one write), so that the log's order is
// the order of the holds.
const inside = `echo "in $0 $*" >>"$LOG"; sleep 0.00$(($$ % 5)); echo "out $0 $*" >>"$LOG"`

// checkLog fails the test when two commands whose lock sets intersect were
// inside at once, and returns how many commands ran.
func checkLog(t *testing.T, path string) int {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	in := map[string][]string{} // id -> its locks, while inside
	n := 0
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		fields := strings.Fields(sc.Text())
		if len(fields) < 3 {
			t.Fatalf("log line %d: %q", line, sc.Text())
		}
		id, locks := fields[1], fields[2:]
		switch fields[0] {
		case "in":
			for other, held := range in {
				for _, l := range locks {
					if slices.Contains(held, l) {
						t.Fatalf("log line %d: %s entered with %v while %s was inside with %v: both held %s", line, id, locks, other, held, l)
					}
				}
			}
			in[id] = locks
			n++
		case "out":
			delete(in, id)
		}
	}
	if len(in) != 0 {
		t.Fatalf("commands never left: %v", in)
	}
	return n
}

// SetNoDeadlock runs two processes that loop rounds times each, one
// asking `fence run a b`, the other `fence run b a`, both waiting without
// limit: nested runs in opposite orders deadlock; a set in byte order
// cannot. Both must finish within bound and never hold a lock at once.
func SetNoDeadlock(t *testing.T, env []string, rounds int, bound time.Duration) time.Duration {
	t.Helper()
	dir := t.TempDir()
	log := filepath.Join(dir, "log")
	env = append(slices.Clone(env), "LOG="+log)
	start := time.Now()
	var cmds []*exec.Cmd
	for i, set := range []string{"a b", "b a"} {
		loop := fmt.Sprintf(`i=0; while [ $i -lt %d ]; do fence run %s --ttl 10s -- sh -c '%s' w%d %s || exit; i=$((i+1)); done`,
			rounds, set, inside, i, set)
		cmd := exec.Command("sh", "-c", loop)
		cmd.Env = env
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, cmd)
	}
	done := make(chan error, len(cmds))
	for _, c := range cmds {
		go func() { done <- c.Wait() }()
	}
	timer := time.NewTimer(bound)
	defer timer.Stop()
	for range cmds {
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("a loop failed: %v", err)
			}
		case <-timer.C:
			for _, c := range cmds {
				_ = c.Process.Kill()
			}
			t.Fatalf("the loops did not finish within %v: deadlock?", bound)
		}
	}
	took := time.Since(start)
	if n := checkLog(t, log); n != 2*rounds {
		t.Fatalf("%d commands ran, want %d", n, 2*rounds)
	}
	return took
}

// SetContenders runs contenders processes, each running `fence run` rounds
// times over a random subset (2 to 4, in random order) of 5 locks: no two
// commands whose sets intersect may ever be inside at once, and every
// contender must finish within bound.
func SetContenders(t *testing.T, env []string, contenders, rounds int, bound time.Duration) {
	t.Helper()
	dir := t.TempDir()
	log := filepath.Join(dir, "log")
	env = append(slices.Clone(env), "LOG="+log)
	locks := []string{"l1", "l2", "l3", "l4", "l5"}
	var wg sync.WaitGroup
	errs := make(chan error, contenders)
	deadline := time.Now().Add(bound)
	for c := range contenders {
		wg.Go(func() {
			for r := range rounds {
				set := slices.Clone(locks)
				rand.Shuffle(len(set), func(i, j int) { set[i], set[j] = set[j], set[i] })
				set = set[:2+rand.IntN(3)]
				args := append([]string{"run"}, set...)
				args = append(args, "--ttl", "10s", "--wait", time.Until(deadline).Round(time.Millisecond).String(),
					"--", "sh", "-c", inside, fmt.Sprintf("c%d.%d", c, r))
				args = append(args, set...)
				cmd := exec.Command("fence", args...)
				cmd.Env = env
				out, err := cmd.CombinedOutput()
				if err != nil {
					errs <- fmt.Errorf("contender %d, round %d (%v): %v: %s", c, r, set, err, out)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		return
	}
	if n := checkLog(t, log); n != contenders*rounds {
		t.Fatalf("%d commands ran, want %d", n, contenders*rounds)
	}
}
