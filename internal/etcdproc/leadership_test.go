package etcdproc

import (
	"testing"
	"time"
)

// TestLongestLed: the longest led stretch is clipped to the window, runs
// to one period past its last sample, and ends at the first leaderless
// sample. The cluster tests excuse a stop by it, so a wrong answer would
// hide a needless kill.
func TestLongestLed(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	// led 0-150 (samples 0..100), leaderless 150-300, led 300-500 (samples 300..450, last).
	w := &LeaderWatch{every: 50 * time.Millisecond}
	for ms := 0; ms < 500; ms += 50 {
		w.samples = append(w.samples, leaderSample{at(ms), ms < 150 || ms >= 300})
	}
	for _, c := range []struct {
		from, to int
		want     time.Duration
	}{
		{0, 500, 200 * time.Millisecond},  // the second stretch, to one period past its last sample
		{0, 250, 150 * time.Millisecond},  // the first, ended by the sample at 150
		{100, 250, 50 * time.Millisecond}, // clipped at from
		{350, 400, 50 * time.Millisecond}, // clipped at both ends
		{150, 300, 0},                     // no led sample inside
		{-1000, -500, 0},                  // before every sample
	} {
		if got := w.LongestLed(at(c.from), at(c.to)); got != c.want {
			t.Errorf("LongestLed(%d ms, %d ms) = %v, want %v", c.from, c.to, got, c.want)
		}
	}
}
