package coord

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestValidateName(t *testing.T) {
	good := []string{"a", "a/b", "/", "jobs/nightly-backup", "ünïcode ✓", "a\u00a0b", strings.Repeat("x", MaxNameLen)}
	for _, n := range good {
		if err := ValidateName(n); err != nil {
			t.Errorf("ValidateName(%q) = %v, want nil", n, err)
		}
	}
	bad := []string{"", "a\x00b", "tab\there", "nl\n", "del\x7f", "c1\u0085", strings.Repeat("x", MaxNameLen+1), "\xff\xfe",
		"a\u202eb", "a\u200bb", "\ufeff", "a\ue000", "a\u0378"}
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

// TestValidateHolder: a holder is checked as a lock name is, up to
// maxHolderLen bytes; "" (the default) is allowed.
func TestValidateHolder(t *testing.T) {
	for _, h := range []string{"", "host:123", "ci runner ✓", strings.Repeat("h", maxHolderLen)} {
		if err := ValidateHolder(h); err != nil {
			t.Errorf("ValidateHolder(%q) = %v", h, err)
		}
	}
	for _, h := range []string{"a\nb", "root\u202e", "ops\u200b", "\xff", strings.Repeat("h", maxHolderLen+1)} {
		if err := ValidateHolder(h); !errors.Is(err, ErrInvalid) {
			t.Errorf("ValidateHolder(%q) = %v, want ErrInvalid", h, err)
		}
	}
}

func TestValidateTTL(t *testing.T) {
	for _, d := range []time.Duration{0, -time.Second, maxTTL + 1} {
		if !errors.Is(ValidateTTL(d), ErrInvalid) {
			t.Errorf("ValidateTTL(%v) accepted", d)
		}
	}
	if err := ValidateTTL(15 * time.Second); err != nil {
		t.Error(err)
	}
}
