//go:build linux

package history_test

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"testing"
	"time"

	"github.com/fence-dev/fence/internal/exitcode"
	"github.com/fence-dev/fence/internal/supervise"
	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/coord/local"
	"github.com/fence-dev/fence/pkg/history"
	"github.com/fence-dev/fence/pkg/history/localstore"
)

// TestRunLeavesEvents runs commands under `fence run` (supervise.Run, with
// its watchdog) on a recording coordinator: each way a run ends leaves its
// events in the lock's history.
func TestRunLeavesEvents(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	open := func(t *testing.T) history.Recorder {
		c, err := local.Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		s, err := localstore.Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		r := history.Wrap(c, s)
		t.Cleanup(func() { r.Close() })
		return r
	}
	run := func(t *testing.T, r coord.Coordinator, lock string, deadline time.Duration, cmd ...string) int {
		code, _ := superviseRun(ctxT(t), r, supervise.Options{
			Lock: lock, Command: cmd, TTL: 5 * time.Second, Holder: "runner", Wait: coord.WaitForever,
			Deadline: deadline, ConflictExitCode: 75, Stdout: io.Discard, Stderr: io.Discard,
		})
		return code
	}
	token := func(t *testing.T, r history.Recorder, lock string) uint64 {
		evs, err := r.History(ctxT(t), lock, 0)
		if err != nil || len(evs) == 0 {
			t.Fatalf("no history for %s: %v", lock, err)
		}
		return evs[0].Token
	}

	t.Run("Success", func(t *testing.T) {
		r := open(t)
		if code := run(t, r, "ok", 0, "true"); code != 0 {
			t.Fatalf("exit %d", code)
		}
		tok := token(t, r, "ok")
		if got, want := kinds(t, r, "ok"), fmt.Sprintf("acquired:runner:%d released:runner:%d", tok, tok); got != want {
			t.Fatalf("history %s, want %s", got, want)
		}
	})
	t.Run("CommandFails", func(t *testing.T) {
		r := open(t)
		if code := run(t, r, "fails", 0, "sh", "-c", "exit 3"); code != 3 {
			t.Fatalf("exit %d", code)
		}
		tok := token(t, r, "fails")
		if got, want := kinds(t, r, "fails"), fmt.Sprintf("acquired:runner:%d released:runner:%d", tok, tok); got != want {
			t.Fatalf("history %s, want %s", got, want)
		}
	})
	t.Run("DeadlineExceeded", func(t *testing.T) {
		r := open(t)
		if code := run(t, r, "slow", 300*time.Millisecond, "sleep", "30"); code != 124 {
			t.Fatalf("exit %d, want 124", code)
		}
		tok := token(t, r, "slow")
		want := fmt.Sprintf("acquired:runner:%d deadline_exceeded:runner:%d released:runner:%d", tok, tok, tok)
		if got := kinds(t, r, "slow"); got != want {
			t.Fatalf("history %s, want %s", got, want)
		}
	})
	t.Run("Revoked", func(t *testing.T) {
		r := open(t)
		done := make(chan int, 1)
		go func() { done <- run(t, r, "revoked", 0, "sleep", "30") }()
		// Revoke as soon as the run's 'acquired' is on record (a revoke
		// between the grant and that record would be recorded first).
		admin := open(t)
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			if evs, err := admin.History(ctxT(t), "revoked", 0); err == nil && len(evs) > 0 {
				if _, err := admin.Revoke(ctxT(t), "revoked"); err == nil {
					break
				}
			}
			if time.Now().After(deadline) {
				t.Fatal("the run never held the lock")
			}
		}
		if code := <-done; code != 76 {
			t.Fatalf("exit %d, want 76", code)
		}
		tok := token(t, r, "revoked")
		want := fmt.Sprintf("acquired:runner:%d revoked:runner:%d lease_lost:runner:%d", tok, tok, tok)
		if got := kinds(t, r, "revoked"); got != want {
			t.Fatalf("history %s, want %s", got, want)
		}
	})
	t.Run("Busy", func(t *testing.T) {
		r := open(t)
		l := acquire(t, r, "busy", "other", 30*time.Second)
		code, _ := superviseRun(ctxT(t), r, supervise.Options{Lock: "busy", Command: []string{"true"}, TTL: 5 * time.Second,
			Holder: "runner", ConflictExitCode: 75, Stdout: io.Discard, Stderr: io.Discard})
		if code != 75 {
			t.Fatalf("exit %d, want 75", code)
		}
		if got, want := kinds(t, r, "busy"), fmt.Sprintf("acquired:other:%d", l.Token); got != want {
			t.Fatalf("history %s, want %s (a busy run leaves nothing)", got, want)
		}
	})
}

// superviseRun is `fence run` of the library: supervise.Start, then the
// Runner's Run on c.
func superviseRun(ctx context.Context, c coord.Coordinator, opts supervise.Options) (int, error) {
	r, err := supervise.Start(opts)
	if err != nil {
		return exitcode.Failure, err
	}
	defer r.Close()
	return r.Run(ctx, c)
}
