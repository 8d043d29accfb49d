package coord

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestValidateName(t *testing.T) {
	good := []string{"a", "a/b", "/", "jobs/nightly-backup", "ünïcode ✓", strings.Repeat("x", MaxNameLen)}
	for _, n := range good {
		if err := ValidateName(n); err != nil {
			t.Errorf("ValidateName(%q) = %v, want nil", n, err)
		}
	}
	bad := []string{"", "a\x00b", "tab\there", "nl\n", "del\x7f", "c1\u0085", strings.Repeat("x", MaxNameLen+1), "\xff\xfe"}
	for _, n := range bad {
		err := ValidateName(n)
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("ValidateName(%q) = %v, want ErrInvalid", n, err)
		}
		if err != nil && strings.Contains(err.Error(), "\n") {
			t.Errorf("error for %q spans lines: %q", n, err)
		}
	}
}

func FuzzValidateName(f *testing.F) {
	for _, s := range []string{"a", "a/b", "", "\x00", "é"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		err := ValidateName(s)
		if err == nil && (len(s) == 0 || len(s) > MaxNameLen || strings.ContainsAny(s, "\x00\n\r\t")) {
			t.Fatalf("accepted %q", s)
		}
		if err != nil && !errors.Is(err, ErrInvalid) {
			t.Fatalf("error %v does not wrap ErrInvalid", err)
		}
	})
}

func TestValidateTTL(t *testing.T) {
	for _, d := range []time.Duration{0, -time.Second, MaxTTL + 1} {
		if !errors.Is(ValidateTTL(d), ErrInvalid) {
			t.Errorf("ValidateTTL(%v) accepted", d)
		}
	}
	if err := ValidateTTL(15 * time.Second); err != nil {
		t.Error(err)
	}
}

func TestLeaseSafeUntil(t *testing.T) {
	now := time.Now()
	l := Lease{Sent: now, TTL: 10 * time.Second}
	if got := l.SafeUntil(time.Second); !got.Equal(now.Add(9 * time.Second)) {
		t.Fatalf("SafeUntil = %v", got.Sub(now))
	}
}
