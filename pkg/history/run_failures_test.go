//go:build linux

package history_test

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fence-dev/fence/internal/supervise"
	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/coord/local"
	"github.com/fence-dev/fence/pkg/history"
	"github.com/fence-dev/fence/pkg/history/localstore"
)

// flakyRenew is a coordinator whose renewals fail while failing is set: the
// fault of a coordinator that cannot be reached for a while.
type flakyRenew struct {
	coord.Coordinator
	failing atomic.Bool
}

func (f *flakyRenew) Renew(ctx context.Context, name, id string) (coord.Renewal, error) {
	if f.failing.Load() {
		return coord.Renewal{}, errors.New("injected: coordinator unreachable")
	}
	return f.Coordinator.Renew(ctx, name, id)
}

// TestRenewalFailuresRecordedWhenBack: renewal failures of a running
// `fence run` reach the lock's history as soon as a renewal succeeds again,
// while the command still runs (so the dashboard shows them during the
// incident), and are not written twice at the end.
func TestRenewalFailuresRecordedWhenBack(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	c, err := local.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	s, err := localstore.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	flaky := &flakyRenew{Coordinator: c}
	flaky.failing.Store(true)
	r := history.Wrap(flaky, s)
	defer r.Close()
	goFile := filepath.Join(t.TempDir(), "go")
	done := make(chan int, 1)
	go func() {
		code, _ := superviseRun(ctxT(t), r, supervise.Options{
			Lock: "flaky", TTL: 3 * time.Second, Holder: "runner", Wait: coord.WaitForever,
			Command:          []string{"sh", "-c", `while [ ! -e "$1" ]; do sleep 0.02; done`, "sh", goFile},
			ConflictExitCode: 75, Stdout: io.Discard, Stderr: io.Discard,
		})
		done <- code
	}()
	// Renewals (every TTL/3 = 1s, retried every 250ms) fail for 1.4s; the
	// lease stays safe until 2.1s after the grant, so the run goes on.
	time.Sleep(1400 * time.Millisecond)
	flaky.failing.Store(false)

	var failed history.Event
	for deadline := time.Now().Add(20 * time.Second); failed.Kind == ""; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no renewal_failed event while the command runs")
		}
		evs, err := s.History(ctxT(t), "flaky", 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range evs {
			if e.Kind == history.RenewalFailed {
				failed = e
			}
		}
	}
	select {
	case code := <-done:
		t.Fatalf("the run ended (exit %d) before the failures were recorded", code)
	default:
	}
	if failed.Count < 1 || failed.Error == "" {
		t.Fatalf("renewal_failed event %+v: want a count and the last error", failed)
	}
	if err := os.WriteFile(goFile, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if code := <-done; code != 0 {
		t.Fatalf("exit %d, want 0", code)
	}
	evs, err := s.History(ctxT(t), "flaky", 0)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range evs {
		if e.Kind == history.RenewalFailed {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("%d renewal_failed events, want 1 (no failure after recovery): %s", n, kinds(t, s, "flaky"))
	}
}
