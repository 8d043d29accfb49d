package cli

import (
	"testing"
	"time"
)

// TestOncePerKeyFollowsTheClock: fence run --once-per D takes its key from
// the factory's clock (injected here): the start of the UTC period, the
// same on both sides of nothing but a boundary.
func TestOncePerKeyFollowsTheClock(t *testing.T) {
	for _, c := range []struct {
		now  time.Time
		per  string
		want string
	}{
		{time.Date(2026, 6, 30, 23, 59, 59, 0, time.UTC), "24h", "2026-06-30T00:00:00Z"},
		{time.Date(2026, 7, 1, 0, 0, 0, 0, time.UTC), "24h", "2026-07-01T00:00:00Z"},
		{time.Date(2026, 7, 1, 1, 59, 59, 0, time.FixedZone("CEST", 2*3600)), "24h", "2026-06-30T00:00:00Z"},
		{time.Date(2026, 7, 1, 9, 29, 0, 0, time.UTC), "30m", "2026-07-01T09:00:00Z"},
		{time.Date(2026, 7, 1, 9, 30, 0, 0, time.UTC), "30m", "2026-07-01T09:30:00Z"},
	} {
		f, _ := testFactory(false)
		f.Now = func() time.Time { return c.now }
		cmd := newCmdRun(f)
		if err := cmd.Flags().Parse([]string{"--once-per", c.per}); err != nil {
			t.Fatal(err)
		}
		o := &runOptions{}
		o.oncePer, _ = time.ParseDuration(cmd.Flags().Lookup("once-per").Value.String())
		o.onceFor, _ = time.ParseDuration(cmd.Flags().Lookup("once-for").Value.String())
		key, err := onceKey(cmd, f, o)
		if err != nil || key != c.want {
			t.Errorf("at %v, --once-per %s: key %q, %v; want %q", c.now, c.per, key, err, c.want)
		}
	}
}
