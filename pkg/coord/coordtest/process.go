package coordtest

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/fence-dev/fence/pkg/clock"
	"github.com/fence-dev/fence/pkg/coord"
)

func (s *suite) needProcessLeases(t *testing.T) {
	t.Helper()
	if !s.h.ProcessLeases {
		t.Skip("the backend does not attach leases to processes")
	}
	if s.h.Spawn == nil {
		t.Fatal("Harness.ProcessLeases needs Harness.Spawn")
	}
}

// attacher returns c.
func attacher(c coord.Coordinator) (coord.Coordinator, bool) { return c, true }

// ownGroup puts a helper in a process group of its own, as fence run puts
// its command.
func ownGroup(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
}

// dead reports whether pid has exited (gone, or a zombie not yet reaped).
func dead(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH) {
		return true
	}
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return false
	}
	return b[i+2] == 'Z' || b[i+2] == 'X'
}

// processTakeover: a holder process attached to its lease, killed with
// SIGKILL, is taken over long before its TTL.
func (s *suite) processTakeover(t *testing.T) {
	s.needProcessLeases(t)
	name := s.name(t, "process")
	c := s.client(t)
	p := s.spawn(t, nil, "hold", name, (2 * guard).String(), "process")
	m := p.next(t, "acquired")
	if info := inspect(t, c, name); info.Process == nil || !slices.Contains(info.Process.PIDs, m.PID) {
		t.Errorf("Inspect: Process %+v, want the holder's pid %d attached", info.Process, m.PID)
	}
	queued := make(chan struct{})
	ch := goAcquire(ctx(t), c, name, coord.AcquireOptions{Holder: "successor", Wait: coord.WaitForever, OnWait: notify(queued)})
	signalled(t, queued, "successor queued")
	time.Sleep(50 * time.Millisecond)
	select {
	case r := <-ch:
		t.Fatalf("successor got the lock (%v, %v) while the attached holder process is alive", r.l, r.err)
	default:
	}
	p.kill(t)
	r := await(t, ch, "successor of a killed process")
	if r.err != nil {
		t.Fatalf("successor: %v", r.err)
	}
	if m.Sent.Add(time.Duration(m.TTL)).Sub(clock.Now()) <= 0 {
		t.Errorf("lock of a killed process taken over only after its TTL %v", time.Duration(m.TTL))
	}
	if r.l.Token <= m.Token {
		t.Errorf("successor's token %d after the killed holder's %d", r.l.Token, m.Token)
	}
	release(t, c, r.l)
}

// attachProcessTakeover: processes attached after the grant
// (ProcessAttacher, as fence run records its command's group) count the
// same: when they are all gone the lease is taken over before its TTL.
func (s *suite) attachProcessTakeover(t *testing.T) {
	s.needProcessLeases(t)
	name := s.name(t, "attach")
	c1, c2 := s.client(t), s.client(t)
	a, ok := attacher(c1)
	if !ok {
		t.Fatalf("%T does not implement coord.Coordinator", c1)
	}
	sleeper := s.spawn(t, ownGroup, "sleep")
	sm := sleeper.next(t, "ready")
	l := acquire(t, c1, name, coord.AcquireOptions{Holder: "attached", TTL: 2 * guard})
	pi := coord.ProcessInfo{PIDs: []int{sm.PID}, PGID: sm.PID}
	if err := a.AttachProcess(ctx(t), name, l.ID, pi); err != nil {
		t.Fatalf("AttachProcess: %v", err)
	}
	if info := inspect(t, c2, name); info.Process == nil || info.Process.PGID != sm.PID {
		t.Errorf("Inspect after AttachProcess: Process %+v, want pgid %d", info.Process, sm.PID)
	}
	queued := make(chan struct{})
	ch := goAcquire(ctx(t), c2, name, coord.AcquireOptions{Holder: "successor", Wait: coord.WaitForever, OnWait: notify(queued)})
	signalled(t, queued, "successor queued")
	sleeper.kill(t)
	r := await(t, ch, "successor of a lease whose processes died")
	if r.err != nil {
		t.Fatalf("successor: %v", r.err)
	}
	if d := r.at.Sub(l.Sent); d >= l.TTL {
		t.Errorf("taken over only after the TTL (%v)", d)
	}
	if r.l.Token <= l.Token {
		t.Errorf("token %d after %d", r.l.Token, l.Token)
	}
	if err := a.AttachProcess(ctx(t), name, l.ID, pi); !errors.Is(err, coord.ErrLeaseLost) {
		t.Errorf("AttachProcess to a lease taken over = %v, want ErrLeaseLost", err)
	}
	if err := c1.Release(ctx(t), name, l.ID); err != nil {
		t.Errorf("Release of a lease taken over = %v", err)
	}
	wantHeldBy(t, c1, r.l)
	release(t, c2, r.l)
}

// expiredHolderGroupStopped: when a process-attached lease expires while its
// supervisor is frozen (alive, not renewing) and its command's group still
// runs, the successor holds the lock only after that group is dead, and not
// before the TTL.
func (s *suite) expiredHolderGroupStopped(t *testing.T) {
	s.needProcessLeases(t)
	name := s.name(t, "frozen")
	c1, c2 := s.client(t), s.client(t)
	frozen := s.spawn(t, nil, "sleep")
	fm := frozen.next(t, "ready")
	if err := syscall.Kill(fm.PID, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(fm.PID, syscall.SIGCONT) }) // runs before the helper's own cleanup
	group := s.spawn(t, ownGroup, "sleep")
	gm := group.next(t, "ready")
	l := acquire(t, c1, name, coord.AcquireOptions{
		Holder: "frozen", TTL: s.h.ShortTTL,
		Process: &coord.ProcessInfo{PIDs: []int{fm.PID}, PGID: gm.PID},
	})
	r := await(t, goAcquire(ctx(t), c2, name, coord.AcquireOptions{Holder: "successor", Wait: coord.WaitForever}), "successor")
	if r.err != nil {
		t.Fatalf("successor: %v", r.err)
	}
	if !dead(gm.PID) {
		t.Errorf("successor holds the lock while the expired holder's command (pgid %d) still runs", gm.PID)
	}
	if d := r.at.Sub(l.Sent); d < l.TTL {
		t.Errorf("lease of a live (frozen) supervisor taken over %v after the grant, before its TTL %v", d, l.TTL)
	}
	if r.l.Token <= l.Token {
		t.Errorf("token %d after %d", r.l.Token, l.Token)
	}
	release(t, c2, r.l)
}
