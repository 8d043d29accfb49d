package scripttest

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// slotInside is the command the semaphore tests run under fence run
// --slots: it logs "start ID SLOT TOKEN" once fence holds a slot and "end
// ID SLOT TOKEN" before fence releases it (O_APPEND: each line one write).
const slotInside = `echo "start $0 $FENCE_SLOT $FENCE_TOKEN" >>"$LOG"; sleep "$HOLD"; echo "end $0 $FENCE_SLOT $FENCE_TOKEN" >>"$LOG"`

// SlotStats is what a semaphore run's log showed.
type SlotStats struct {
	Runs           int
	MaxConcurrency int
	// Order is the contenders' ids in the order of their tokens (the order
	// of the grants).
	Order []int
}

// checkSlotLog reads a log of slotInside lines and fails the test when
// more than slots commands were inside at once, when a slot was used by
// two at once or is out of range, or when a slot's tokens did not grow.
func checkSlotLog(t *testing.T, path string, slots int) SlotStats {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var st SlotStats
	inside := map[int]int{}     // slot -> id inside
	lastTok := map[int]uint64{} // slot -> the last token seen in it
	tokenOf := map[int]uint64{} // id -> its token
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		var what string
		var id, slot int
		var tok uint64
		if _, err := fmt.Sscanf(sc.Text(), "%s c%d %d %d", &what, &id, &slot, &tok); err != nil {
			t.Fatalf("log line %d: %q: %v", line, sc.Text(), err)
		}
		if slot < 0 || slot >= slots {
			t.Fatalf("log line %d: %q: slot %d is not one of 0..%d", line, sc.Text(), slot, slots-1)
		}
		switch what {
		case "start":
			if other, ok := inside[slot]; ok {
				t.Fatalf("log line %d: c%d started in slot %d while c%d was inside it", line, id, slot, other)
			}
			if tok <= lastTok[slot] {
				t.Fatalf("log line %d: c%d has token %d in slot %d after token %d: tokens must grow", line, id, tok, slot, lastTok[slot])
			}
			inside[slot], lastTok[slot], tokenOf[id] = id, tok, tok
			st.Runs++
			st.MaxConcurrency = max(st.MaxConcurrency, len(inside))
			if len(inside) > slots {
				t.Fatalf("log line %d: %d commands inside a semaphore of %d slots", line, len(inside), slots)
			}
		case "end":
			if inside[slot] != id {
				t.Fatalf("log line %d: c%d ended in slot %d, which it was not in", line, id, slot)
			}
			delete(inside, slot)
		}
	}
	if len(inside) != 0 {
		t.Fatalf("commands never ended: %v", inside)
	}
	for id := range tokenOf {
		st.Order = append(st.Order, id)
	}
	slices.SortFunc(st.Order, func(a, b int) int { return int(tokenOf[a]) - int(tokenOf[b]) })
	seen := map[uint64]bool{}
	for _, tok := range tokenOf {
		if seen[tok] {
			t.Fatalf("token %d was given twice", tok)
		}
		seen[tok] = true
	}
	return st
}

// holdersAndWaiters reads `fence status LOCK -o json`: its holders and
// waiters.
func holdersAndWaiters(env []string, lock string) (int, int) {
	cmd := exec.Command("fence", "status", lock, "-o", "json")
	cmd.Env = env
	out, _ := cmd.Output()
	var v struct {
		Waiters int
		Holders []json.RawMessage
	}
	if json.Unmarshal(out, &v) != nil {
		return -1, -1
	}
	return len(v.Holders), v.Waiters
}

// SlotContenders starts n `fence run LOCK --slots slots` processes, one
// after the other, each once the one before it holds a slot or waits (so
// that their order of arrival is known), each command holding its slot
// for hold; then checks the log (checkSlotLog) and that the grants went in
// the order of arrival (FIFO). It returns what the log showed.
func SlotContenders(t *testing.T, env []string, lock string, n, slots int, hold time.Duration) SlotStats {
	t.Helper()
	dir := t.TempDir()
	log := filepath.Join(dir, "log")
	env = append(slices.Clone(env), "LOG="+log, "HOLD="+strconv.FormatFloat(hold.Seconds(), 'f', 3, 64))
	type proc struct {
		cmd    *exec.Cmd
		out    strings.Builder
		exited atomic.Bool
		err    chan error
	}
	var procs []*proc
	for i := range n {
		p := &proc{err: make(chan error, 1)}
		p.cmd = exec.Command("fence", "run", lock, "--slots", strconv.Itoa(slots), "--ttl", "10s", "--",
			"sh", "-c", slotInside, fmt.Sprintf("c%d", i))
		p.cmd.Env = env
		sw := &syncWriter{w: &p.out}
		p.cmd.Stdout, p.cmd.Stderr = sw, sw
		if err := p.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() { err := p.cmd.Wait(); p.exited.Store(true); p.err <- err }()
		t.Cleanup(func() { p.cmd.Process.Kill() })
		procs = append(procs, p)
		// Arrived once it holds a slot or waits: the holders and waiters
		// are then the processes so far that have not exited, it too
		// (those before it count at most once each).
		for deadline := time.Now().Add(HangGuard); ; {
			h, w := holdersAndWaiters(env, lock)
			exited := 0
			for _, q := range procs[:i] {
				if q.exited.Load() {
					exited++
				}
			}
			if h+w >= i+1-exited {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("contender %d never held or queued (%d holders, %d waiters)", i, h, w)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	for i, p := range procs {
		select {
		case err := <-p.err:
			if err != nil {
				t.Fatalf("contender %d: %v: %s", i, err, p.out.String())
			}
		case <-time.After(HangGuard):
			t.Fatalf("contender %d did not finish within %v", i, HangGuard)
		}
	}
	st := checkSlotLog(t, log, slots)
	if st.Runs != n {
		t.Fatalf("%d commands ran, want %d", st.Runs, n)
	}
	for i, id := range st.Order {
		if id != i {
			t.Fatalf("grants in the order %v of the contenders' arrival: not first come, first served", st.Order)
		}
	}
	return st
}

// syncWriter serialises the writes of a process's stdout and stderr.
type syncWriter struct {
	mu sync.Mutex
	w  *strings.Builder
}

func (s *syncWriter) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(b)
}

// Slots is the semaphore's test through real fence run processes, on the
// coordinator of env: 10 contenders on --slots 3 (never more than 3 inside
// at once, at least 2 seen at once, a slot never used by two at once,
// grants first come first served, tokens only grow); mixed --slots refused
// with 125 naming both values; limit 1 on that lock: strictly serial
// runs. It logs the largest concurrency seen.
func Slots(t *testing.T, env []string) {
	t.Helper()
	const lock = "sem"
	st := SlotContenders(t, env, lock, 10, 3, 500*time.Millisecond)
	t.Logf("10 contenders on --slots 3: max concurrency %d, grants in order %v", st.MaxConcurrency, st.Order)
	if st.MaxConcurrency < 2 {
		t.Fatalf("10 contenders on --slots 3 were never 2 inside at once (max %d)", st.MaxConcurrency)
	}

	// Mixed --slots: refused while the lock has a holder.
	held := Output(t, env, "acquire", lock, "--slots", "3", "--ttl", "1m", "-o", "json")
	var l struct {
		LeaseID string `json:"lease_id"`
		Slot    int
	}
	if err := json.Unmarshal([]byte(held), &l); err != nil || l.LeaseID == "" {
		t.Fatalf("acquire --slots 3 -o json: %q: %v", held, err)
	}
	for _, args := range [][]string{
		{"run", lock, "--slots", "2", "-n", "--", "true"},
		{"run", lock, "-n", "--", "true"},
		{"acquire", lock, "--slots", "4", "--wait", "1s"},
	} {
		cmd := exec.Command("fence", args...)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		}
		want := "--slots 1"
		if i := slices.Index(args, "--slots"); i >= 0 {
			want = "--slots " + args[i+1]
		}
		if code != 125 || !strings.Contains(string(out), "--slots 3") || !strings.Contains(string(out), want) || strings.Count(string(out), "\n") != 1 {
			t.Errorf("fence %s beside a holder with --slots 3: exit %d, %q; want 125 and one line naming --slots 3 and %s", strings.Join(args, " "), code, out, want)
		}
	}
	Output(t, env, "release", lock, "--lease", l.LeaseID)

	// limit 1: strictly serial.
	Output(t, env, "limit", lock, "1")
	st = SlotContenders(t, env, lock, 5, 3, 200*time.Millisecond)
	t.Logf("5 contenders on --slots 3 under limit 1: max concurrency %d", st.MaxConcurrency)
	if st.MaxConcurrency != 1 {
		t.Fatalf("limit 1 on a 3-slot lock: %d commands inside at once, want strictly serial runs", st.MaxConcurrency)
	}
	Output(t, env, "thaw", lock)
}
