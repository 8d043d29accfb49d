//go:build linux

package proc

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// TestMain doubles as a helper process: with PROC_TEST_HELPER set, the test
// binary does one job and exits instead of running tests.
func TestMain(m *testing.M) {
	switch os.Getenv("PROC_TEST_HELPER") {
	case "":
		goleak.VerifyTestMain(m)
	case "signal-group":
		pgid, _ := strconv.Atoi(os.Getenv("PROC_TEST_PGID"))
		err := SignalGroup(pgid, syscall.SIGKILL)
		fmt.Println(err)
		if errors.Is(err, os.ErrPermission) {
			os.Exit(0)
		}
		os.Exit(1)
	default:
		os.Exit(2)
	}
}

func TestParseStat(t *testing.T) {
	line := "4242 (we ird) (name) S 1 4242 4200 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 100 18446744073709551615\n"
	st, err := parseStat([]byte(line))
	if err != nil {
		t.Fatal(err)
	}
	want := Stat{PID: 4242, State: 'S', PPID: 1, PGID: 4242, SID: 4200, Start: 987654}
	if st != want {
		t.Fatalf("parseStat = %+v, want %+v", st, want)
	}
	for _, bad := range []string{"", "1 (x) S 1 2", "x (y) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20", "1 x) S"} {
		if _, err := parseStat([]byte(bad)); err == nil {
			t.Errorf("parseStat(%q) accepted", bad)
		}
	}
}

func TestSelf(t *testing.T) {
	id, err := Self()
	if err != nil {
		t.Fatal(err)
	}
	if id.PID != os.Getpid() || id.Start == 0 {
		t.Fatalf("Self = %v", id)
	}
	if Check(id) != Running || !id.Alive() {
		t.Fatalf("self is %v", Check(id))
	}
	// The same PID with another start time is a reused PID: gone.
	if reused := (ID{PID: id.PID, Start: id.Start + 1}); reused.Alive() {
		t.Fatal("a PID with a different start time reads as alive")
	}
	if (ID{}).Alive() || (ID{PID: id.PID}).Alive() {
		t.Fatal("a zero ID reads as alive")
	}
	if _, err := Lookup(-1); !errors.Is(err, ErrNoProcess) {
		t.Fatalf("Lookup(-1) = %v", err)
	}
}

// startSleep starts `sleep 1000`, in its own process group when group is
// set, and makes sure it is killed and reaped at the end of the test.
func startSleep(t *testing.T, group bool) (*exec.Cmd, ID) {
	t.Helper()
	cmd := exec.Command("sleep", "1000")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: group}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	id, err := Lookup(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	return cmd, id
}

// eventually waits (bounded, as a hang guard) until cond holds.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestStoppedAndZombie(t *testing.T) {
	cmd, id := startSleep(t, false)
	if got := Check(id); got != Running {
		t.Fatalf("fresh child is %v", got)
	}
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the child is stopped", func() bool { return Check(id) == Stopped })
	if !id.Alive() {
		t.Fatal("a stopped process reads as dead")
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// Not reaped yet: a zombie, which counts as gone, and WaitExit returns.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := WaitExit(ctx, id); err != nil {
		t.Fatalf("WaitExit of a killed child: %v", err)
	}
	if st, err := ReadStat(id.PID); err != nil || !st.Gone() {
		t.Fatalf("want an unreaped zombie, got %+v, %v", st, err)
	}
	if Check(id) != Gone {
		t.Fatal("a zombie reads as alive")
	}
	if _, err := Lookup(id.PID); !errors.Is(err, ErrNoProcess) {
		t.Fatalf("Lookup(zombie) = %v", err)
	}
	_ = cmd.Wait()
	if err := WaitExit(ctx, id); err != nil {
		t.Fatalf("WaitExit of a reaped process: %v", err)
	}
}

// TestWaitExitNotChild waits for a process that is not a child of the test:
// a grandchild whose parent shell has exited.
func TestWaitExitNotChild(t *testing.T) {
	out, err := exec.Command("sh", "-c", "sleep 1000 >/dev/null 2>&1 & echo $!").Output()
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil {
		t.Fatal(err)
	}
	id, err := Lookup(pid)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Kill(pid, syscall.SIGKILL)
	done := make(chan error, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	go func() { done <- WaitExit(ctx, id) }()
	select {
	case err := <-done:
		t.Fatalf("WaitExit returned %v while the process runs", err)
	case <-time.After(50 * time.Millisecond):
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("WaitExit: %v", err)
	}
}

func TestWaitExitCancel(t *testing.T) {
	_, id := startSleep(t, false)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- WaitExit(ctx, id) }()
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("WaitExit after cancel = %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("WaitExit ignored the cancelled context")
	}
	if !id.Alive() {
		t.Fatal("the process died")
	}
}

func TestWaitAny(t *testing.T) {
	a, ida := startSleep(t, false)
	_, idb := startSleep(t, false)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	type res struct {
		id  ID
		err error
	}
	done := make(chan res, 1)
	go func() { id, err := WaitAny(ctx, idb, ida); done <- res{id, err} }()
	time.Sleep(20 * time.Millisecond)
	_ = a.Process.Kill()
	r := <-done
	if r.err != nil || r.id != ida {
		t.Fatalf("WaitAny = %v, %v; want %v", r.id, r.err, ida)
	}
	// An ID that is already gone returns at once.
	gone := ID{PID: ida.PID, Start: ida.Start + 7}
	if id, err := WaitAny(ctx, idb, gone); err != nil || id != gone {
		t.Fatalf("WaitAny with a gone ID = %v, %v", id, err)
	}
	short, cancel2 := context.WithTimeout(ctx, 30*time.Millisecond)
	defer cancel2()
	if _, err := WaitAny(short, idb); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitAny past its deadline = %v", err)
	}
}

func TestGroupMembersAndSignal(t *testing.T) {
	cmd := exec.Command("sh", "-c", "sleep 1000 & sleep 1000 & echo ready; wait")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); cmd.Wait() })
	if line, _ := bufio.NewReader(stdout).ReadString('\n'); line != "ready\n" {
		t.Fatalf("helper said %q", line)
	}
	pgid := cmd.Process.Pid
	leader, err := Lookup(pgid)
	if err != nil {
		t.Fatal(err)
	}
	members, err := GroupMembers(pgid, leader)
	if err != nil {
		t.Fatal(err)
	}
	if len(members) != 3 {
		t.Fatalf("group %d has %d members %v, want 3 (sh and two sleeps)", pgid, len(members), members)
	}
	// A leader recorded with another start time means the PGID was reused.
	if m, _ := GroupMembers(pgid, ID{PID: pgid, Start: leader.Start + 1}); len(m) != 0 {
		t.Fatalf("reused PGID reports members %v", m)
	}
	if err := SignalGroup(pgid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, m := range members {
		if err := WaitExit(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	if m, err := GroupMembers(pgid, leader); err != nil || len(m) != 0 {
		t.Fatalf("after SIGKILL the group has %v (%v)", m, err)
	}
	_ = cmd.Wait()
	// The sleeps were reparented; once their new parent has reaped them the
	// group is empty.
	eventually(t, "the group is empty", func() bool {
		return errors.Is(SignalGroup(pgid, syscall.SIGKILL), ErrNoProcess)
	})
	for _, g := range []int{0, 1, -5} {
		if err := SignalGroup(g, syscall.SIGKILL); err == nil {
			t.Fatalf("SignalGroup(%d) accepted", g)
		}
	}
}

// TestSignalGroupNotPermitted runs a helper as an unprivileged user that tries
// to kill a root-owned group: it must get a permission error, and the group
// must survive.
func TestSignalGroupNotPermitted(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to start a helper as another user")
	}
	_, leader := startSleep(t, true)
	bin := copyExecutable(t)
	cmd := exec.Command(bin, "-test.run=^$")
	cmd.Env = append(os.Environ(), "PROC_TEST_HELPER=signal-group", "PROC_TEST_PGID="+strconv.Itoa(leader.PID))
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helper as uid 65534: %v: %s", err, out)
	}
	if !strings.Contains(string(out), "permission") {
		t.Fatalf("helper said %q", out)
	}
	if !leader.Alive() {
		t.Fatal("the group was killed by an unprivileged user")
	}
}

// copyExecutable copies the test binary where another user can run it.
func copyExecutable(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "proctest")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.Open(self)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	bin := filepath.Join(dir, "helper")
	dst, err := os.OpenFile(bin, os.O_CREATE|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
	return bin
}
