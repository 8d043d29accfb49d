package local

import (
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
	pid := func(i int) int { return ws[i].cmd.Process.Pid }
	rung := func(want ...int64) {
		t.Helper()
		got := bells(t, c)
		for i, w := range want {
			size, ok := got[pid(i)]
			switch {
			case w < 0 && ok:
				t.Errorf("waiter %d still has a doorbell", i)
			case w >= 0 && !ok:
				t.Errorf("waiter %d has no doorbell", i)
			case w >= 0 && size != w:
				t.Errorf("doorbell of waiter %d: size %d, want %d (%v)", i, size, w, map[bool]string{true: "rung", false: "not rung"}[w > 0])
			}
		}
	}
	rung(0, 0, 0, 0, 0) // queueing rings nobody
	release(t, c, l)
	ws[0].expect("acquired")
	// The release rang 0 and 1; the grant to 0 rang 1 and 2.
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
