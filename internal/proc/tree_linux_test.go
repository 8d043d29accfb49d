//go:build linux

package proc

import (
	"bufio"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// startTree starts sh with a background child, a child in a new session and
// a grandchild, and returns sh and the PIDs of those three, in that order.
func startTree(t *testing.T) (*exec.Cmd, []int) {
	t.Helper()
	cmd := exec.Command("sh", "-c", `sh -c 'echo 0 $$; exec sleep 30' &
setsid sh -c 'echo 1 $$; exec sleep 30' &
sh -c 'sh -c "echo 2 \$\$; exec sleep 30" & wait' &
wait`)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	sc := bufio.NewScanner(out)
	pids := make([]int, 3)
	for n := 0; n < 3 && sc.Scan(); n++ {
		role, pid, _ := strings.Cut(strings.TrimSpace(sc.Text()), " ")
		i, err1 := strconv.Atoi(role)
		p, err2 := strconv.Atoi(pid)
		if err1 != nil || err2 != nil || i < 0 || i > 2 {
			t.Fatalf("bad line %q", sc.Text())
		}
		pids[i] = p
	}
	if slices.Contains(pids, 0) {
		t.Fatalf("tree printed %v", pids)
	}
	return cmd, pids
}

func TestDescendants(t *testing.T) {
	cmd, want := startTree(t)
	ds, err := Descendants(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	var got []int
	for _, d := range ds {
		got = append(got, d.PID)
		if d.PID == cmd.Process.Pid {
			t.Fatal("root listed among its descendants")
		}
	}
	for _, pid := range want {
		if !slices.Contains(got, pid) {
			t.Errorf("descendant %d (setsid or grandchild) missing from %v", pid, got)
		}
	}
	if ds, err := Descendants(1 << 30); err != nil || len(ds) != 0 {
		t.Fatalf("descendants of a PID that does not exist: %v, %v", ds, err)
	}
}

func TestSignalDescendants(t *testing.T) {
	cmd, pids := startTree(t)
	// The filter spares the process in a session of its own (a child of sh,
	// which keeps waiting for it).
	spared := pids[1]
	n, err := SignalDescendants(cmd.Process.Pid, syscall.SIGKILL, func(s Stat) bool { return s.PID == spared })
	if err != nil || n < 3 {
		t.Fatalf("signalled %d, %v; want the tree but one (at least 3 processes)", n, err)
	}
	waitGone := func(pid int) bool {
		for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
			if st, err := ReadStat(pid); err != nil || st.Gone() {
				return true
			}
		}
		return false
	}
	for _, pid := range []int{pids[0], pids[2]} {
		if !waitGone(pid) {
			t.Errorf("process %d survived SIGKILL", pid)
		}
	}
	if st, err := ReadStat(spared); err != nil || st.Gone() {
		t.Fatalf("the spared process %d was signalled", spared)
	}
	if n, err := SignalDescendants(cmd.Process.Pid, syscall.SIGKILL, nil); err != nil || n < 1 {
		t.Fatalf("second pass: %d, %v", n, err)
	}
	if !waitGone(spared) {
		t.Fatal("the spared process survived the second pass")
	}
}

// TestSignalIDRefusesReusedPID: an ID whose start time does not match the
// process that now has the PID is never signalled.
func TestSignalIDRefusesReusedPID(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	id, err := Lookup(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	stale := ID{PID: id.PID, Start: id.Start - 1}
	if err := SignalID(stale, syscall.SIGKILL); err == nil {
		t.Fatal("signalled a process whose start time does not match")
	}
	if st, err := ReadStat(id.PID); err != nil || st.Gone() {
		t.Fatal("the process was killed")
	}
	if err := SignalID(id, syscall.SIGKILL); err != nil {
		t.Fatalf("signal by matching ID: %v", err)
	}
}
