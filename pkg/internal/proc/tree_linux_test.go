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
	if err := signalID(stale, syscall.SIGKILL); err == nil {
		t.Fatal("signalled a process whose start time does not match")
	}
	if st, err := ReadStat(id.PID); err != nil || st.Gone() {
		t.Fatal("the process was killed")
	}
	if err := signalID(id, syscall.SIGKILL); err != nil {
		t.Fatalf("signal by matching ID: %v", err)
	}
}
