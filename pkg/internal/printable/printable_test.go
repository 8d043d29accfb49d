package printable

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// TestCheck: what is refused, and as what; what is allowed.
func TestCheck(t *testing.T) {
	for _, s := range []string{"a", "a/b", "/", "jobs/nightly-backup", "ünïcode ✓", "日本語", "Ελληνικά", "emoji 🚀",
		"é (e + U+0301)", "a b", "a\u00a0b", "tab\u2003space", "a\u3000b", strings.Repeat("x", 256)} {
		if err := Check("lock name", s, 256); err != nil {
			t.Errorf("Check(%q) = %v, want nil", s, err)
		}
	}
	for _, tc := range []struct{ s, want string }{
		{"", "lock name is empty"},
		{strings.Repeat("x", 257), "lock name is 257 bytes, the limit is 256"},
		{"\xff\xfe", "not valid UTF-8"},
		{"a\x00b", "control character U+0000"},
		{"tab\there", "control character U+0009"},
		{"nl\n", "control character U+000A"},
		{"del\x7f", "control character U+007F"},
		{"c1\u0085", "control character U+0085"},
		{"ls\u2028", "control character U+2028"},
		{"ps\u2029", "control character U+2029"},
		{"txt.\u202egnp", "invisible format character U+202E"}, // right-to-left override
		{"a\u2066b", "invisible format character U+2066"},      // left-to-right isolate
		{"a\u200bb", "invisible format character U+200B"},      // zero-width space
		{"a\u200db", "invisible format character U+200D"},      // zero-width joiner
		{"\ufeffa", "invisible format character U+FEFF"},       // byte order mark
		{"soft\u00adhyphen", "invisible format character U+00AD"},
		{"tag\U000E0041", "invisible format character U+E0041"},
		{"a\u3164b", "invisible character U+3164"}, // Hangul filler (a letter, drawn as nothing)
		{"a\u034fb", "invisible character U+034F"}, // combining grapheme joiner
		{"a\ufe0fb", "invisible character U+FE0F"}, // variation selector
		{"a\ue000b", "private-use character U+E000"},
		{"a\U0010fffdb", "private-use character U+10FFFD"},
		{"a\u0378b", "unassigned code point U+0378"},
		{"a\U000e0080b", "invisible character U+E0080"}, // reserved, default ignorable
		{"a\uffffb", "unassigned code point U+FFFF"},
	} {
		err := Check("lock name", tc.s, 256)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Check(%q) = %v, want %q", tc.s, err, tc.want)
			continue
		}
		// The message is one line of printable ASCII: it shows the
		// character, never draws it.
		for _, r := range err.Error() {
			if r < 0x20 || r >= 0x7f {
				t.Errorf("Check(%q): message %q has %U", tc.s, err, r)
				break
			}
		}
	}
}

// FuzzCheck: whatever Check accepts is valid UTF-8 of the right length
// with no rune that Check refuses alone.
func FuzzCheck(f *testing.F) {
	for _, s := range []string{"a", "a/b", "", "\x00", "é", "\u202e", "a\u200bb"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if Check("x", s, 256) != nil {
			return
		}
		if s == "" || len(s) > 256 || !utf8.ValidString(s) {
			t.Fatalf("accepted %q", s)
		}
		for _, r := range s {
			if refused(r) != "" {
				t.Fatalf("accepted %q with %U", s, r)
			}
		}
	})
}
