package contention

import (
	"testing"
	"time"

	"github.com/fence-dev/fence/pkg/history"
)

// TestOf: waits come from acquired events, holds from released ones; the
// sparklines share one scale; waits above holds are the bottleneck.
func TestOf(t *testing.T) {
	s := time.Second
	evs := []history.Event{
		{Kind: history.Acquired, Wait: 0},
		{Kind: history.Released, HeldFor: 1 * s},
		{Kind: history.Acquired, Wait: 4 * s},
		{Kind: history.RenewalFailed},
		{Kind: history.Released, HeldFor: 1 * s},
		{Kind: history.Acquired, Wait: 8 * s},
	}
	sum := Of(evs)
	if w := sum.Wait; w.Count != 3 || w.Median != 4*s || w.Max != 8*s || w.Total != 12*s {
		t.Errorf("waits %+v", w)
	}
	if h := sum.Hold; h.Count != 2 || h.Max != s || h.Total != 2*s {
		t.Errorf("holds %+v", h)
	}
	if !sum.Bottleneck() || sum.Top() != 8*s {
		t.Errorf("bottleneck %v, top %v", sum.Bottleneck(), sum.Top())
	}
	if got := Sparkline(sum.Wait.Recent, sum.Top()); got != "▁▄█" {
		t.Errorf("waits sparkline %q", got)
	}
	if got := Sparkline(sum.Hold.Recent, sum.Top()); got != "▁▁" {
		t.Errorf("holds sparkline %q", got)
	}
	if !Of(nil).Empty() {
		t.Error("no events: not empty")
	}
}
