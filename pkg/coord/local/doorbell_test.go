package local

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fence-dev/fence/internal/proc"
	"github.com/fence-dev/fence/pkg/coord"
)

// bells returns the doorbells in waiters/ by the PID in their names, with
// their sizes (a doorbell that has rung has size 1).
func bells(t testing.TB, c *Coordinator) map[int]int64 {
	t.Helper()
	ents, err := os.ReadDir(c.waitersDir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[int]int64{}
	for _, e := range ents {
		f := strings.SplitN(e.Name(), "-", 4)
		pid, _ := strconv.Atoi(f[1])
		fi, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("doorbell %s has mode %v", e.Name(), fi.Mode().Perm())
		}
		out[pid] = fi.Size()
	}
	return out
}

func hasKey[K comparable, V any](m map[K]V, k K) bool {
	_, ok := m[k]
	return ok
}

// TestHandoffRingsOnlyTheFirstWaiters: a release wakes the first two waiters
// (the next in line, and the one that watches it does take the lock), and
// the grant to the first wakes the two after it; waiters further back are
// never woken by a handoff. Each waiter is a process; its doorbell file
// shows whether it was rung.
func TestHandoffRingsOnlyTheFirstWaiters(t *testing.T) {
	dir := newDir(t)
	c := openTB(t, dir)
	l := acquire(t, c, "bell", coord.AcquireOptions{})
	var ws []*helper
	for i := 0; i < 5; i++ {
		h := spawn(t, nil, "wait", dir, "bell", "1m", "process")
		h.expect("queued")
		ws = append(ws, h)
	}
	if fi, err := os.Stat(c.waitersDir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("waiters directory: %v %v", fi, err)
	}
	rung := ringCheck(t, c, ws)
	rung(0, 0, 0, 0, 0) // queueing rings nobody
	release(t, c, l)
	ws[0].expect("acquired")
	// The release rang 0 and 1; the grant to 0 rang 1 and 2 (ringDelay
	// later).
	rung(-1, 1, 1, 0, 0)
	// The holder dies: the two waiters that follow it see it (not by a
	// doorbell), the first takes over and rings the two after it.
	ws[0].signal(syscall.SIGKILL)
	ws[1].expect("acquired")
	rung(-1, -1, 1, 1, 0)
	ws[1].signal(syscall.SIGKILL)
	ws[2].expect("acquired")
	rung(-1, -1, -1, 1, 1)
	for _, h := range ws {
		h.kill()
	}
}

// ringCheck returns the check of the doorbells of waiters ws: want[i] is the
// size of waiter i's doorbell (0: not rung, 1: rung, -1: none). It waits up
// to guard for them to be so (a grant rings ringDelay later), then fails.
func ringCheck(t *testing.T, c *Coordinator, ws []*helper) func(want ...int64) {
	return func(want ...int64) {
		t.Helper()
		var bad []string
		for end := time.Now().Add(guard); ; time.Sleep(5 * time.Millisecond) {
			got := bells(t, c)
			bad = bad[:0]
			for i, w := range want {
				size, ok := got[ws[i].cmd.Process.Pid]
				switch {
				case w < 0 && ok:
					bad = append(bad, fmt.Sprintf("waiter %d still has a doorbell", i))
				case w >= 0 && !ok:
					bad = append(bad, fmt.Sprintf("waiter %d has no doorbell", i))
				case w >= 0 && size != w:
					bad = append(bad, fmt.Sprintf("doorbell of waiter %d: size %d, want %d (%v)", i, size, w, map[bool]string{true: "rung", false: "not rung"}[w > 0]))
				}
			}
			if len(bad) == 0 || time.Now().After(end) {
				break
			}
		}
		for _, b := range bad {
			t.Error(b)
		}
	}
}

// TestGrantRingIsNotLost: the waiter that takes the lock rings the waiters
// behind it ringDelay later; when it closes its Coordinator and exits
// before that (without a release, which would ring them too), Close rings
// them. Its lease is not tied to its process, so nobody behind takes over
// when it exits: without Close's ring, the second waiter behind it would
// never be rung.
func TestGrantRingIsNotLost(t *testing.T) {
	dir := newDir(t)
	c := openTB(t, dir)
	l := acquire(t, c, "bell-close", coord.AcquireOptions{})
	first := spawn(t, nil, "waitexit", dir, "bell-close", "1m")
	first.expect("queued")
	ws := []*helper{first}
	for i := 0; i < 2; i++ {
		h := spawn(t, nil, "wait", dir, "bell-close", "1m", "process")
		h.expect("queued")
		ws = append(ws, h)
	}
	release(t, c, l)
	first.expect("closed")
	ringCheck(t, c, ws)(-1, 1, 1)
	for _, h := range ws[1:] {
		h.kill()
	}
}

// TestHolderKilledBeforeItsRing: the new holder is killed right after its
// grant, before its ring of the waiters behind is due (ringDelay): the next
// waiter, which the release rang and which watches the holder's process as
// the waiter that was ahead of it, takes over all the same, at once.
func TestHolderKilledBeforeItsRing(t *testing.T) {
	dir := newDir(t)
	c := openTB(t, dir)
	l := acquire(t, c, "bell-kill", coord.AcquireOptions{})
	var ws []*helper
	for i := 0; i < 3; i++ {
		h := spawn(t, nil, "wait", dir, "bell-kill", "1m", "process")
		h.expect("queued")
		ws = append(ws, h)
	}
	release(t, c, l)
	ws[0].expect("acquired")
	killed := time.Now()
	ws[0].signal(syscall.SIGKILL)
	ws[1].expect("acquired")
	// By the holder's process, not by the stall check (1s) that a waiter
	// which found the lock free but not its turn falls back on.
	if d := time.Since(killed); d > 500*time.Millisecond {
		t.Errorf("the next waiter took over %v after the holder's death: it did not follow the holder's process", d)
	}
	for _, h := range ws {
		h.kill()
	}
}

// TestStaleDoorbellsRemoved: the doorbell of a waiter that died is removed
// by the next waiter to queue; those of live processes and of other PID
// namespaces stay; a waiter removes its own.
func TestStaleDoorbellsRemoved(t *testing.T) {
	dir := newDir(t)
	c := openTB(t, dir)
	if err := os.MkdirAll(c.waitersDir, 0o700); err != nil {
		t.Fatal(err)
	}
	dead := startSleep(t, false)
	deadID, err := proc.Lookup(dead.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	dead.Process.Kill()
	dead.Wait()
	self, err := proc.Self()
	if err != nil {
		t.Fatal(err)
	}
	ns := proc.PIDNamespace()
	names := map[string]bool{ // name -> kept
		bellName(ticket{ID: "dead", PID: deadID.PID, Start: deadID.Start, PIDNS: ns}):             false,
		bellName(ticket{ID: "live", PID: self.PID, Start: self.Start, PIDNS: ns}):                 true,
		bellName(ticket{ID: "elsewhere", PID: deadID.PID, Start: deadID.Start, PIDNS: "pid:[1]"}): true,
	}
	for n := range names {
		if err := os.WriteFile(filepath.Join(c.waitersDir, n), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	l := acquire(t, c, "stale", coord.AcquireOptions{})
	queued := make(chan coord.LockInfo, 1)
	ch := goAcquire(tctx(t), openTB(t, dir), "stale", coord.AcquireOptions{Wait: coord.WaitForever,
		OnWait: func(li coord.LockInfo) { queued <- li }})
	select {
	case <-queued:
	case <-time.After(guard):
		t.Fatal("waiter did not queue")
	}
	if ents, _ := os.ReadDir(c.waitersDir); len(ents) != 3 {
		t.Errorf("doorbells while waiting: %v, want the waiter's and the 2 kept", ents)
	}
	release(t, c, l)
	if r := await(t, ch, "waiter"); r.err != nil {
		t.Fatal(r.err)
	}
	ents, _ := os.ReadDir(c.waitersDir)
	left := map[string]bool{}
	for _, e := range ents {
		left[e.Name()] = true
	}
	for n, kept := range names {
		if left[n] != kept {
			t.Errorf("doorbell %s: present %v, want %v", n, left[n], kept)
		}
		delete(left, n)
	}
	if len(left) > 0 {
		t.Errorf("doorbells left behind: %v", left)
	}
}

// TestWaitersDirRemoved: waiters/ removed while a Coordinator that used it is
// open is made again by its next wait.
func TestWaitersDirRemoved(t *testing.T) {
	dir := newDir(t)
	c, w := openTB(t, dir), openTB(t, dir)
	for round := 0; round < 2; round++ {
		l := acquire(t, c, "again", coord.AcquireOptions{})
		queued := make(chan coord.LockInfo, 1)
		ch := goAcquire(tctx(t), w, "again", coord.AcquireOptions{Wait: coord.WaitForever,
			OnWait: func(li coord.LockInfo) { queued <- li }})
		select {
		case <-queued:
		case r := <-ch:
			t.Fatalf("round %d: %+v", round, r)
		case <-time.After(guard):
			t.Fatal("waiter did not queue")
		}
		release(t, c, l)
		r := await(t, ch, "waiter")
		if r.err != nil {
			t.Fatal(r.err)
		}
		release(t, w, r.l)
		if err := os.RemoveAll(c.waitersDir); err != nil {
			t.Fatal(err)
		}
	}
}
