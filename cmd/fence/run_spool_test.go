package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	st "github.com/fence-dev/fence/cmd/fence/internal/scripttest"
	"github.com/fence-dev/fence/internal/etcdproc"
)

// TestRunHistoryKeptThroughStall: etcd stalled (SIGSTOP) past a holder's
// TTL, `fence run` stops its command (76) and exits within its bound
// although no history write can reach etcd; the events it could not write
// (renewal_failed, lease_lost) are kept on the host and written, with
// their original times, by the next fence command once etcd answers
// again: `fence history` shows them, once each, even when asked twice.
func TestRunHistoryKeptThroughStall(t *testing.T) {
	srv := etcdproc.Start(t)
	ep := srv.Endpoints()[0]
	dir := t.TempDir()
	env := st.Env(dir)
	started := filepath.Join(dir, "started")
	cmd := exec.Command("fence", "--endpoints", ep, "run", "spooled", "--ttl", "2s", "--",
		"sh", "-c", `touch "$1"; exec sleep 60`, "sh", started)
	cmd.Env = env
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	for deadline := time.Now().Add(st.HangGuard); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(started); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the command did not start:\n%s", stderr.String())
		}
	}
	// Let one renewal through, so that the failures come from the stall.
	time.Sleep(time.Second)
	stall := time.Now()
	if err := srv.Freeze(); err != nil {
		t.Fatal(err)
	}
	thawed := false
	defer func() {
		if !thawed {
			srv.Thaw()
		}
	}()
	code := st.ExitCode(t, cmd)
	exited := time.Now()
	t.Logf("fence run exited %d, %v after the stall began:\n%s", code, exited.Sub(stall).Round(time.Millisecond), stderr.String())
	if code != 76 {
		t.Fatalf("fence run exited %d, want 76", code)
	}
	// The spool costs no more than a local fsync: fence still exits within
	// about a second of the stop, itself within the TTL of the stall
	// (measured 1.8-1.9 s in all; 2 s of slack for a loaded machine).
	if d := exited.Sub(stall); d > 2*time.Second+time.Second+2*time.Second {
		t.Errorf("fence run exited %v after the stall began, want within the TTL (2s) and a second", d)
	}
	if err := srv.Thaw(); err != nil {
		t.Fatal(err)
	}
	thawed = true

	type event struct {
		Time string `json:"time"`
		Kind string `json:"kind"`
	}
	read := func() map[string][]time.Time {
		out := st.Output(t, env, "--endpoints", ep, "history", "spooled", "-o", "json")
		var evs []event
		if err := json.Unmarshal([]byte(out), &evs); err != nil {
			t.Fatalf("fence history: %v\n%s", err, out)
		}
		byKind := map[string][]time.Time{}
		for _, e := range evs {
			tm, err := time.Parse(time.RFC3339Nano, e.Time)
			if err != nil {
				t.Fatalf("event time %q: %v", e.Time, err)
			}
			byKind[e.Kind] = append(byKind[e.Kind], tm)
		}
		t.Logf("history: %s", out)
		return byKind
	}
	for round := 1; round <= 2; round++ {
		byKind := read()
		for _, k := range []string{"renewal_failed", "lease_lost"} {
			times := byKind[k]
			if len(times) != 1 {
				t.Fatalf("round %d: %d %s events, want 1", round, len(times), k)
			}
			// Their own times, during the stall, not when they were written.
			if tm := times[0]; tm.Before(stall.Add(-time.Second)) || tm.After(exited) {
				t.Errorf("round %d: %s at %v, want between the stall (%v) and fence's exit (%v)", round, k, tm, stall, exited)
			}
		}
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "history-spool-*", "*")); len(left) != 0 {
		t.Errorf("spool not empty after the flush: %v", left)
	}
}
