package guard_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/guard"
	"github.com/fence-dev/fence/pkg/guard/internal/check"
)

func TestStaleError(t *testing.T) {
	var err error = &guard.StaleError{Key: "job-42", Token: 3, Accepted: 7}
	wrapped := fmt.Errorf("put: %w", err)
	if !errors.Is(wrapped, guard.ErrStale) || errors.Is(wrapped, guard.ErrNotFound) {
		t.Fatalf("errors.Is on %v", wrapped)
	}
	var se *guard.StaleError
	if !errors.As(wrapped, &se) || se.Accepted != 7 {
		t.Fatalf("errors.As on %v", wrapped)
	}
	if got, want := err.Error(), `stale fencing token 3 for key "job-42": token 7 was already accepted`; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
}

func TestValidate(t *testing.T) {
	for _, k := range []string{"a", "a/b", "ü", "x y"} {
		if err := guard.ValidateKey(k); err != nil {
			t.Errorf("ValidateKey(%q) = %v", k, err)
		}
	}
	for _, k := range []string{"", "\x00", "a\tb", "\xff", "a\u202eb", "a\u200bb", "\ue000"} {
		if err := guard.ValidateKey(k); !errors.Is(err, coord.ErrInvalid) {
			t.Errorf("ValidateKey(%q) = %v, want ErrInvalid", k, err)
		}
	}
	// A key is checked as a lock name is: one rule.
	for _, k := range []string{"a", "x y", "a\u00a0b", "a\u2028", "a\u3164", "\u0378", "é", "a\ufe0f", strings.Repeat("k", check.MaxKeyLen+1)} {
		if kerr, nerr := guard.ValidateKey(k), coord.ValidateName(k); (kerr == nil) != (nerr == nil) {
			t.Errorf("%q: ValidateKey = %v, but ValidateName = %v", k, kerr, nerr)
		}
	}
	for tok, ok := range map[uint64]bool{0: false, 1: true, check.MaxToken: true, check.MaxToken + 1: false} {
		if err := check.Token(tok); (err == nil) != ok || (err != nil && !errors.Is(err, coord.ErrInvalid)) {
			t.Errorf("ValidateToken(%d) = %v", tok, err)
		}
	}
}
