package supervise_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/fence-dev/fence/internal/exitcode"
	"github.com/fence-dev/fence/internal/supervise"
	"github.com/fence-dev/fence/pkg/coord"
)

// TestSetLosesOne: a run under three locks, one of which is revoked (forced,
// or asked to stop): the command is stopped, the run exits 76 naming that
// lock, and every lease of the set is released. In this process, so that
// -race sees the set's renewals, watches and release.
func TestSetLosesOne(t *testing.T) {
	for _, bk := range backends {
		for _, ask := range []bool{false, true} {
			name := bk.name + "/forced"
			if ask {
				name = bk.name + "/asked"
			}
			t.Run(name, func(t *testing.T) {
				b := bk.open(t)
				ready := tempPath(t, "ready")
				done := make(chan struct{})
				go func() {
					defer close(done)
					deadline := time.Now().Add(hang)
					for time.Now().Before(deadline) {
						if _, err := os.Stat(ready); err == nil {
							break
						}
						time.Sleep(10 * time.Millisecond)
					}
					ctx, cancel := context.WithTimeout(context.Background(), hang)
					defer cancel()
					if ask {
						if _, _, err := b.c.RequestStop(ctx, "b", 0); err != nil {
							t.Errorf("RequestStop: %v", err)
						}
						return
					}
					if _, err := b.c.Revoke(ctx, "b"); err != nil {
						t.Errorf("Revoke: %v", err)
					}
				}()
				code, err := run(t, b, supervise.Options{
					Locks: []string{"c", "a", "b"}, TTL: 30 * time.Second,
					Command: []string{"sh", "-c", `[ "$FENCE_LOCKS $FENCE_LOCK_1 $FENCE_LOCK_3" = "3 c b" ] && [ -z "$FENCE_LOCK" ] && touch "$R"; exec sleep 60`},
					Env:     append(os.Environ(), "R="+ready),
				})
				<-done
				if code != exitcode.LeaseLost || err == nil || !strings.Contains(err.Error(), `lease on "b"`) {
					t.Fatalf("code %d, %v; want 76 naming b", code, err)
				}
				if ask && !strings.Contains(err.Error(), "was revoked (fence revoke asked") {
					t.Fatalf("%v: want the revoked message", err)
				}
				ctx, cancel := context.WithTimeout(context.Background(), hang)
				defer cancel()
				for _, l := range []string{"a", "b", "c"} {
					if info, err := b.c.Inspect(ctx, l); err != nil || info.Held {
						t.Fatalf("%s after the run: %+v, %v; want it free", l, info, err)
					}
				}
			})
		}
	}
}

// TestSetRefusesBadNames: a set whose names are invalid or given twice is
// refused (125, coord.ErrInvalid) before any lock is taken or the command
// runs: the CLI checks the names first, fencing.AcquireSet for other
// callers.
func TestSetRefusesBadNames(t *testing.T) {
	b := localBackend(t)
	ran := tempPath(t, "ran")
	for _, locks := range [][]string{{"a", "b", "a"}, {"a", "b\x00"}} {
		code, err := run(t, b, supervise.Options{Locks: locks, TTL: 5 * time.Second, Command: []string{"touch", ran}})
		if code != exitcode.Failure || !errors.Is(err, coord.ErrInvalid) {
			t.Errorf("Locks %q: code %d, %v; want 125 and ErrInvalid", locks, code, err)
		}
	}
	if _, err := os.Stat(ran); err == nil {
		t.Error("the command ran")
	}
	ctx, cancel := context.WithTimeout(context.Background(), hang)
	defer cancel()
	if info, err := b.c.Inspect(ctx, "a"); err != nil || info.Held || info.LastToken != 0 {
		t.Errorf("a after the refusals: %+v, %v; want it never taken", info, err)
	}
}
