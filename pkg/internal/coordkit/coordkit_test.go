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
