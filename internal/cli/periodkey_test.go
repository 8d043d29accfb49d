package cli

import (
	"testing"
	"time"

	"github.com/fence-dev/fence/pkg/coord"
)

// TestPeriodKey: --once-per keys on an injected clock: the start of the
// period holding the instant, in UTC, aligned to the Unix epoch, the same
// for every instant of a period and different across a boundary, whatever
// the instant's time zone.
func TestPeriodKey(t *testing.T) {
	berlin := time.FixedZone("CET", 3600)
	day, hour := 24*time.Hour, time.Hour
	for _, c := range []struct {
		at     time.Time
		period time.Duration
		want   string
	}{
		{time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC), day, "2026-03-01T00:00:00Z"},
		{time.Date(2026, 3, 1, 23, 59, 59, 999999999, time.UTC), day, "2026-03-01T00:00:00Z"},
		{time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC), day, "2026-03-02T00:00:00Z"},
		// 00:30 in CET is 23:30 UTC of the day before: UTC days count.
		{time.Date(2026, 3, 2, 0, 30, 0, 0, berlin), day, "2026-03-01T00:00:00Z"},
		{time.Date(2026, 3, 1, 13, 59, 59, 0, time.UTC), hour, "2026-03-01T13:00:00Z"},
		{time.Date(2026, 3, 1, 14, 0, 0, 0, time.UTC), hour, "2026-03-01T14:00:00Z"},
		{time.Date(2026, 3, 1, 14, 7, 0, 0, time.UTC), 15 * time.Minute, "2026-03-01T14:00:00Z"},
		{time.Date(2026, 3, 1, 14, 15, 0, 0, time.UTC), 15 * time.Minute, "2026-03-01T14:15:00Z"},
		// A week from the epoch (a Thursday), not from a Monday.
		{time.Date(2026, 3, 4, 12, 0, 0, 0, time.UTC), 7 * day, "2026-02-26T00:00:00Z"},
		{time.Date(2026, 3, 5, 0, 0, 0, 0, time.UTC), 7 * day, "2026-03-05T00:00:00Z"},
		{time.Date(2026, 3, 1, 0, 0, 1, 400e6, time.UTC), 1500 * time.Millisecond, "2026-03-01T00:00:00Z"},
		{time.Date(1969, 12, 31, 23, 0, 0, 0, time.UTC), day, "1969-12-31T00:00:00Z"},
	} {
		if got := periodKey(c.at, c.period); got != c.want {
			t.Errorf("periodKey(%v, %v) = %s, want %s", c.at, c.period, got, c.want)
		}
	}
	// Every instant of a run of hours maps to its hour, each hour to one key.
	seen := map[string]bool{}
	start := time.Date(2026, 12, 31, 20, 0, 0, 0, time.UTC)
	for at := start; at.Before(start.Add(10 * hour)); at = at.Add(7 * time.Minute) {
		k := periodKey(at, hour)
		if want := at.Truncate(hour).Format(time.RFC3339); k != want {
			t.Fatalf("periodKey(%v, 1h) = %s, want %s", at, k, want)
		}
		seen[k] = true
	}
	if len(seen) != 10 {
		t.Errorf("%d keys for 10 hours", len(seen))
	}
	if err := coord.ValidateKey(periodKey(time.Now(), day)); err != nil {
		t.Errorf("a period key is not a valid key: %v", err)
	}
}
