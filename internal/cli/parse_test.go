package cli

import (
	"errors"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/spf13/pflag"

	"github.com/fence-dev/fence/pkg/coord"
)

func TestParseLockName(t *testing.T) {
	for _, ok := range []string{"a", "a/b", "/", "deploy prod", "ünïcode", strings.Repeat("x", 256)} {
		if err := coord.ValidateName(ok); err != nil {
			t.Errorf("%q refused: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "a\x00b", "tab\there", "new\nline", "\x7f", "\u0085", strings.Repeat("x", 257), "\xff"} {
		err := coord.ValidateName(bad)
		if err == nil || !errors.Is(err, coord.ErrInvalid) {
			t.Errorf("%q: err = %v, want ErrInvalid", bad, err)
		}
	}
}

func TestParseToken(t *testing.T) {
	for s, want := range map[string]uint64{"1": 1, "42": 42, "0042": 42, "9223372036854775807": 1<<63 - 1} {
		if n, err := ParseToken(s); err != nil || n != want {
			t.Errorf("ParseToken(%q) = %d, %v", s, n, err)
		}
	}
	for _, s := range []string{"", "0", "-1", "+1", " 1", "1 ", "1e3", "0x10", "9223372036854775808", "18446744073709551615", "18446744073709551616", "abc"} {
		if n, err := ParseToken(s); err == nil {
			t.Errorf("ParseToken(%q) = %d, want an error", s, n)
		}
	}
}

func TestDurationFlag(t *testing.T) {
	var ttl, wait time.Duration
	fs := pflag.NewFlagSet("x", pflag.ContinueOnError)
	DurationVarP(fs, &ttl, "ttl", "", 15*time.Second, false, "")
	DurationVarP(fs, &wait, "wait", "", 0, true, "")
	if err := fs.Parse([]string{"--ttl", "2m", "--wait", "0"}); err != nil || ttl != 2*time.Minute || wait != 0 {
		t.Fatalf("ttl %v wait %v err %v", ttl, wait, err)
	}
	for _, args := range [][]string{{"--ttl", "0"}, {"--ttl=-1s"}, {"--ttl", "15"}, {"--ttl", "x"}, {"--wait=-1s"}, {"--wait", "soon"}} {
		fs := pflag.NewFlagSet("x", pflag.ContinueOnError)
		fs.SetOutput(&strings.Builder{})
		DurationVarP(fs, &ttl, "ttl", "", 15*time.Second, false, "")
		DurationVarP(fs, &wait, "wait", "", 0, true, "")
		if err := fs.Parse(args); err == nil {
			t.Errorf("%q accepted", args)
		}
	}
}

// FuzzParseLockName: coord.ValidateName, which checks a LOCK argument, never panics; an accepted name is 1 to 256 bytes of
// valid UTF-8 without control characters; a refusal is one line wrapping
// coord.ErrInvalid.
func FuzzParseLockName(f *testing.F) {
	for _, s := range []string{"a", "a/b", "", "\x00", "a\nb", strings.Repeat("é", 128), "\u2028", "\xc3"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		err := coord.ValidateName(s)
		if err != nil {
			if !errors.Is(err, coord.ErrInvalid) {
				t.Fatalf("%q: error %v does not wrap ErrInvalid", s, err)
			}
			if strings.ContainsAny(err.Error(), "\n\r") || strings.ContainsRune(err.Error(), 0) {
				t.Fatalf("%q: error is not one clean line: %q", s, err)
			}
			return
		}
		if len(s) == 0 || len(s) > coord.MaxNameLen || !utf8.ValidString(s) {
			t.Fatalf("accepted %q", s)
		}
		for _, r := range s {
			if unicode.IsControl(r) {
				t.Fatalf("accepted %q with control character %U", s, r)
			}
		}
	})
}

// FuzzParseToken: never panics; an accepted token is positive, at most
// coord.MaxToken, and prints back as the input without leading zeros.
func FuzzParseToken(f *testing.F) {
	for _, s := range []string{"1", "0", "-1", "007", "9223372036854775807", "9223372036854775808", "18446744073709551616"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseToken(s)
		if err != nil {
			return
		}
		if n == 0 || n > coord.MaxToken || strings.TrimLeft(s, "0") != strings.TrimLeft(strings.TrimSpace(s), "0") {
			t.Fatalf("ParseToken(%q) = %d", s, n)
		}
	})
}
