//go:build linux

package supervise_test

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fence-dev/fence/internal/supervise"
	"github.com/fence-dev/fence/internal/syncbuf"
	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/coord/local"
	"github.com/fence-dev/fence/pkg/fencing"
	"github.com/fence-dev/fence/pkg/shards"
)

// TestShardsSignalDuringRestart: a SIGTERM to fence shards run while it
// restarts its command with a changed set (the other member left: this one
// takes its shard) ends fence: "stopping", while the command is stopped for
// the restart; "between", after it stopped and before the next start
// (sent from OnRestart). The command is not started again. (The signal was
// read by no one once the restart had begun, and the next command, which
// never got it, ran on.) Real members on the local backend, the real
// watchdog and command, a real signal to this process.
func TestShardsSignalDuringRestart(t *testing.T) {
	for _, c := range []struct{ when, why string }{
		{"stopping", "interrupted by SIGTERM while the command was stopped to restart it"},
		{"between", "interrupted by SIGTERM while no command ran"},
	} {
		t.Run(c.when, func(t *testing.T) { testSignalDuringRestart(t, c.when, c.why) })
	}
}

func testSignalDuringRestart(t *testing.T, when, why string) {
	// This process is fence here: a SIGTERM must not end the test binary
	// whenever it comes.
	keep := make(chan os.Signal, 8)
	signal.Notify(keep, syscall.SIGTERM)
	defer signal.Stop(keep)

	dir := t.TempDir()
	open := func() coord.Coordinator {
		c, err := local.Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const group, settle = "sig", 50 * time.Millisecond
	sr := &supervise.ShardRunner{}
	if when == "between" {
		sr.OnRestart = func(int, []int, string) {
			if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
				t.Error(err)
			}
			<-keep                            // delivered to every channel of SIGTERM
			time.Sleep(20 * time.Millisecond) // theirs too
		}
	}
	c1 := open()
	m2, err := shards.Join(ctx, open(), group, 2, shards.WithMember("m2"), shards.WithTTL(10*time.Second), shards.WithSettle(settle))
	if err != nil {
		t.Fatal(err)
	}
	defer m2.Leave(context.Background())
	m1, err := shards.Join(ctx, c1, group, 2, shards.WithMember("m1"), shards.WithTTL(10*time.Second), shards.WithSettle(settle),
		shards.WithHold(fencing.OnRenewal(sr.OnRenewal)))
	if err != nil {
		t.Fatal(err)
	}
	defer m1.Leave(context.Background())
	for end := time.Now().Add(10 * time.Second); !m1.Settled() || !m2.Settled() || len(m1.Shards()) != 1; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("m1 and m2 not settled on a shard each: %d, %d", len(m1.Shards()), len(m2.Shards()))
		}
	}
	one := m1.Shards()[0].Number

	log := filepath.Join(t.TempDir(), "log")
	// Each start logs its set; the stop signal makes it log "stopping" and
	// take a second to stop, ignoring further signals.
	script := `echo "start $FENCE_SHARDS" >> ` + log + `
trap 'trap "" TERM; echo stopping >> ` + log + `; sleep 1; exit 7' TERM
while :; do sleep 0.05; done`
	var stderr syncbuf.Buffer
	type result struct {
		code int
		err  error
	}
	done := make(chan result, 1)
	go func() {
		code, err := sr.Run(ctx, c1, m1, supervise.Options{Lock: group, Command: []string{"sh", "-c", script},
			TTL: 10 * time.Second, Grace: 2 * time.Second, Signal: syscall.SIGTERM, Stderr: &stderr}, settle)
		done <- result{code, err}
	}()
	waitLog := func(what string) {
		t.Helper()
		for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
			if b, _ := os.ReadFile(log); strings.Contains(string(b), what) {
				return
			}
		}
		b, _ := os.ReadFile(log)
		select {
		case r := <-done:
			t.Fatalf("never logged %q: fence shards run ended with %d (%v); log:\n%sstderr:\n%s", what, r.code, r.err, b, stderr.String())
		default:
		}
		t.Fatalf("never logged %q; shards %d, settled %v; log:\n%sstderr:\n%s", what, len(m1.Shards()), m1.Settled(), b, stderr.String())
	}
	waitLog(fmt.Sprintf("start %d\n", one))

	if err := m2.Leave(ctx); err != nil {
		t.Fatal(err)
	}
	waitLog("stopping\n") // the restart began
	if when == "stopping" {
		if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case r := <-done:
		t.Logf("fence shards run ended with %d (%v) after the SIGTERM", r.code, r.err)
		if r.code != 143 || r.err == nil || r.err.Error() != why {
			t.Errorf("fence shards run ended with %d (%v); want 143 (%s)", r.code, r.err, why)
		}
	case <-time.After(5 * time.Second):
		b, _ := os.ReadFile(log)
		t.Errorf("fence shards run still runs 5 s after a SIGTERM during a restart; log:\n%s", b)
		cancel()
		<-done
	}
	b, _ := os.ReadFile(log)
	if n := strings.Count(string(b), "start "); n != 1 {
		t.Errorf("the command was started %d times; want once (not again after the SIGTERM); log:\n%s", n, b)
	}
}
