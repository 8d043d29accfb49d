package clock

import (
	"testing"
	"time"
)

func TestBootClockAdvancesWithMonotonic(t *testing.T) {
	b0 := Now()
	time.Sleep(20 * time.Millisecond)
	b1 := Now()
	if d := b1.Sub(b0); d < 20*time.Millisecond || d > 2*time.Second {
		t.Fatalf("boot clock advanced %v over a 20ms sleep", d)
	}
	if b1.Add(time.Hour).Sub(Now()) < 59*time.Minute {
		t.Fatal("Add or Sub wrong")
	}
}
