package coordkit

import (
	"errors"
	"testing"
	"time"

	"github.com/fence-dev/fence/pkg/coord"
)

// TestCheckAcquire: defaults filled in, bad options refused (the
// conformance suite checks that every backend refuses them).
func TestCheckAcquire(t *testing.T) {
	o, err := CheckAcquire("a", coord.AcquireOptions{})
	if err != nil || o.TTL != defaultTTL || o.Holder != coord.DefaultHolder() || o.Wait != 0 {
		t.Errorf("CheckAcquire(zero) = %+v, %v", o, err)
	}
	o, err = CheckAcquire("a", coord.AcquireOptions{TTL: time.Second, Holder: "me", Wait: coord.WaitForever})
	if err != nil || o.TTL != time.Second || o.Holder != "me" || o.Wait != coord.WaitForever {
		t.Errorf("CheckAcquire kept %+v, %v", o, err)
	}
	for what, tc := range map[string]struct {
		name string
		o    coord.AcquireOptions
	}{
		"bad name":       {"a\u202e", coord.AcquireOptions{}},
		"negative TTL":   {"a", coord.AcquireOptions{TTL: -time.Second}},
		"TTL too long":   {"a", coord.AcquireOptions{TTL: 7*24*time.Hour + 1}},
		"negative wait":  {"a", coord.AcquireOptions{Wait: -time.Second}},
		"bad holder":     {"a", coord.AcquireOptions{Holder: "a\x00"}},
		"pid 0":          {"a", coord.AcquireOptions{Process: &coord.ProcessInfo{PIDs: []int{0}}}},
		"init's group":   {"a", coord.AcquireOptions{Process: &coord.ProcessInfo{PGID: 1}}},
		"negative group": {"a", coord.AcquireOptions{Process: &coord.ProcessInfo{PGID: -3}}},
	} {
		if _, err := CheckAcquire(tc.name, tc.o); !errors.Is(err, coord.ErrInvalid) {
			t.Errorf("%s: CheckAcquire = %v, want coord.ErrInvalid", what, err)
		}
	}
}

// TestStamp: a record's retention counts from its write, whatever its
// Finished (unset: now; long past; in the future, as a clock ahead of this
// one may write); 0 is coord.DefaultKeep.
func TestStamp(t *testing.T) {
	now := time.Now()
	for _, c := range []struct {
		name     string
		finished time.Time
		keep     time.Duration
		want     time.Duration
	}{
		{"unset", time.Time{}, time.Hour, time.Hour},
		{"default", now, 0, coord.DefaultKeep},
		{"past", now.Add(-48 * time.Hour), time.Hour, time.Hour},
		{"future", now.Add(time.Hour), time.Hour, time.Hour},
	} {
		rec, keep := Stamp(coord.Completion{Lock: "l", Key: "k", Finished: c.finished}, c.keep)
		if keep != c.want {
			t.Errorf("%s: keep %v, want %v", c.name, keep, c.want)
		}
		if d := rec.Expires.Sub(now); d < c.want || d > c.want+time.Minute {
			t.Errorf("%s: expires %v after the write, want %v", c.name, d, c.want)
		}
		if c.finished.IsZero() && rec.Finished.Sub(now) > time.Minute || !c.finished.IsZero() && !rec.Finished.Equal(c.finished) {
			t.Errorf("%s: finished %v, want %v (now when unset)", c.name, rec.Finished, c.finished)
		}
	}
}
