package clock

import (
	"testing"
	"time"
)

func TestBootClockAdvancesWithMonotonic(t *testing.T) {
	start, b0 := time.Now(), Now()
	time.Sleep(20 * time.Millisecond)
	b1 := Now()
	if d := b1.Sub(b0); d < 20*time.Millisecond || d > 2*time.Second {
		t.Fatalf("boot clock advanced %v over a 20ms sleep", d)
	}
	// FromMono of an earlier instant lands near the earlier reading.
	if skew := FromMono(start).Sub(b0); skew < -5*time.Millisecond || skew > 5*time.Millisecond {
		t.Fatalf("FromMono skew %v", skew)
	}
	if Until(b1.Add(time.Hour)) < 59*time.Minute {
		t.Fatal("Until wrong")
	}
}

func TestBootID(t *testing.T) {
	if id := BootID(); id == "" || id != BootID() {
		t.Fatalf("boot id %q unstable or empty", id)
	}
}
