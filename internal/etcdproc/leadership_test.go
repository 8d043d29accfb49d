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
		w.samples = append(w.samples, leaderSample{at: at(ms), led: ms < 150 || ms >= 300})
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

// TestLedSince: the start of the leadership in place at an instant, ended
// by a sample without a majority leader, another leader, or a new term of
// the same one.
func TestLedSince(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	w := &LeaderWatch{every: 50 * time.Millisecond}
	w.samples = []leaderSample{
		{at(0), true, 1, 2}, {at(50), true, 1, 2}, // member 1, term 2
		{at(100), false, 0, 0},                       // no majority
		{at(150), true, 2, 3}, {at(200), true, 2, 3}, // member 2, term 3
		{at(250), true, 3, 4},                        // member 3 at once
		{at(300), true, 3, 5}, {at(350), true, 3, 5}, // member 3 again, term 5
	}
	for _, c := range []struct {
		at   int
		want int
		ok   bool
	}{
		{60, 0, true}, {99, 0, true}, {120, 0, false}, {200, 150, true}, {260, 250, true},
		{400, 300, true}, {-10, 0, false},
	} {
		got, ok := w.LedSince(at(c.at))
		if ok != c.ok || ok && !got.Equal(at(c.want)) {
			t.Errorf("LedSince(%d ms) = %v, %v; want %d ms, %v", c.at, got.Sub(t0), ok, c.want, c.ok)
		}
	}
}
