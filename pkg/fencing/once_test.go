package fencing_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/fencing"
)

// TestDo: fencing.Do runs a job at most once to success per key, on both
// backends: a failed job leaves no record and runs again; after a success it
// is skipped (coord.ErrCompleted, fn not called); a job whose lease was lost
// before it returned is not recorded (ErrLeaseLost) and runs again.
func TestDo(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			c := b.open(t)
			other := c // one client: the backends open a store of their own each
			ctx, cancel := context.WithTimeout(context.Background(), hang)
			defer cancel()
			acq := coord.AcquireOptions{TTL: 3 * time.Second, Holder: "worker", Wait: coord.WaitForever}
			runs := 0
			job := func(err error) func(context.Context, *fencing.Held) error {
				return func(context.Context, *fencing.Held) error { runs++; return err }
			}
			boom := errors.New("boom")
			if err := fencing.Do(ctx, c, "charge", "2026-01", acq, job(boom)); !errors.Is(err, boom) {
				t.Fatalf("failing job: Do = %v, want its error", err)
			}
			if err := fencing.Do(ctx, c, "charge", "2026-01", acq, job(nil)); err != nil {
				t.Fatalf("Do after a failure: %v", err)
			}
			if err := fencing.Do(ctx, other, "charge", "2026-01", acq, job(nil)); !errors.Is(err, coord.ErrCompleted) {
				t.Fatalf("Do after a success = %v, want ErrCompleted", err)
			}
			if runs != 2 {
				t.Fatalf("the job ran %d times, want 2 (a failure, a success)", runs)
			}
			recs, err := other.Completions(ctx, "charge")
			if err != nil || len(recs) != 1 || recs[0].Holder != "worker" || recs[0].Token == 0 {
				t.Fatalf("records %+v, %v; want one of worker", recs, err)
			}

			// The lease revoked under the job: not recorded.
			lost := func(ctx context.Context, h *fencing.Held) error {
				if _, err := other.Revoke(ctx, "charge"); err != nil {
					return err
				}
				<-ctx.Done() // the next renewal finds it
				return nil
			}
			if err := fencing.Do(ctx, c, "charge", "2026-02", acq, lost); !errors.Is(err, coord.ErrLeaseLost) {
				t.Fatalf("job whose lease was revoked: Do = %v, want ErrLeaseLost", err)
			}
			if _, ok, _ := other.Completion(ctx, "charge", "2026-02"); ok {
				t.Fatal("a job whose lease was lost was recorded")
			}
		})
	}
}

// TestDoWithKeep: WithKeep sets how long Do's completion record is kept
// (its Expires is Finished plus the keep); a keep out of range is refused
// before anything runs.
func TestDoWithKeep(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			c := b.open(t)
			ctx, cancel := context.WithTimeout(context.Background(), hang)
			defer cancel()
			acq := coord.AcquireOptions{TTL: 3 * time.Second, Holder: "worker", Wait: coord.WaitForever}
			ran := false
			job := func(context.Context, *fencing.Held) error { ran = true; return nil }
			if err := fencing.Do(ctx, c, "report", "k", acq, job, fencing.WithKeep(time.Millisecond)); !errors.Is(err, coord.ErrInvalid) || ran {
				t.Fatalf("keep 1ms: Do = %v (ran %v), want ErrInvalid and no run", err, ran)
			}
			if err := fencing.Do(ctx, c, "report", "k", acq, job, fencing.WithKeep(2*time.Hour)); err != nil {
				t.Fatal(err)
			}
			rec, ok, err := c.Completion(ctx, "report", "k")
			if err != nil || !ok {
				t.Fatalf("Completion = %v, %v", ok, err)
			}
			if d := rec.Expires.Sub(rec.Finished); d < 2*time.Hour-time.Second || d > 2*time.Hour+time.Second {
				t.Errorf("record kept %v after it finished, want 2h (WithKeep)", d)
			}
		})
	}
}
