package local

import (
	"bufio"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fence-dev/fence/internal/proc"
	"github.com/fence-dev/fence/pkg/coord"
)

// TestExpiredLeaseNoGroupRecorded: a supervisor froze after starting its
// command but before recording the command's process group, and its lease
// expired. The successor must stop the supervisor's descendants (the
// command) before it holds the lock.
func TestExpiredLeaseNoGroupRecorded(t *testing.T) {
	dir := newDir(t)
	c := openTB(t, dir)
	// The "supervisor": a shell whose child stands for the command.
	sup := exec.Command("sh", "-c", `sleep 60 & echo $!; wait`)
	out, err := sup.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := sup.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sup.Process.Signal(syscall.SIGCONT); sup.Process.Kill(); sup.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	cmdPID, _ := strconv.Atoi(strings.TrimSpace(line))
	command, err := proc.Lookup(cmdPID)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Kill(cmdPID, syscall.SIGKILL) })

	const ttl = 300 * time.Millisecond
	old, err := c.Acquire(tctx(t), "nogroup", coord.AcquireOptions{TTL: ttl, Process: &coord.ProcessInfo{PIDs: []int{sup.Process.Pid}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := sup.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	r := await(t, goAcquire(tctx(t), openTB(t, dir), "nogroup", coord.AcquireOptions{TTL: time.Second, Wait: coord.WaitForever}), "successor")
	if r.err != nil {
		t.Fatal(r.err)
	}
	if command.Alive() {
		t.Fatal("the successor holds the lock while the frozen supervisor's command still runs")
	}
	if r.l.Token <= old.Token {
		t.Fatalf("token %d after %d", r.l.Token, old.Token)
	}
}
