package supervise_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fence-dev/fence/internal/supervise"
	"github.com/fence-dev/fence/pkg/coord"
)

// TestRunSlot: a run of a semaphore (Options.Slots) holds a slot beside
// the other holders and its command gets that slot in FENCE_SLOT; Slots
// with several locks or with Once is refused before anything starts.
func TestRunSlot(t *testing.T) {
	for _, bk := range backends {
		t.Run(bk.name, func(t *testing.T) {
			b := bk.open(t)
			ctx, cancel := context.WithTimeout(context.Background(), hang)
			defer cancel()
			other, err := b.c.Acquire(ctx, "sem", coord.AcquireOptions{TTL: time.Minute, Slots: 3, Holder: "other"})
			if err != nil {
				t.Fatal(err)
			}
			defer b.c.Release(ctx, "sem", other.ID)
			out := tempPath(t, "slot")
			code, err := run(t, b, supervise.Options{Lock: "sem", Slots: 3, TTL: 5 * time.Second, Shell: true,
				Command: []string{`echo "$FENCE_SLOT $FENCE_TOKEN" > ` + shell(out)}})
			if code != 0 || err != nil {
				t.Fatalf("run beside a holder of a 3-slot lock: code %d, %v", code, err)
			}
			if got := strings.TrimSpace(readFile(t, out)); !strings.HasPrefix(got, "1 ") {
				t.Errorf("FENCE_SLOT and FENCE_TOKEN %q; want slot 1 (slot 0 is held)", got)
			}
		})
	}
	for _, o := range []supervise.Options{
		{Locks: []string{"a", "b"}, Slots: 2},
		{Lock: "a", Slots: 2, Once: "k"},
		{Lock: "a", Slots: -1},
		{Lock: "a", Slots: coord.MaxSlots + 1},
	} {
		o.TTL, o.Command = 5*time.Second, []string{"true"}
		if _, err := supervise.Start(o); !errors.Is(err, coord.ErrInvalid) {
			t.Errorf("Start(Slots %d, Locks %v, Once %q): %v; want ErrInvalid", o.Slots, o.Locks, o.Once, err)
		}
	}
}
