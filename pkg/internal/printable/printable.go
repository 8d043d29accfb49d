// Package printable is the one check of the names that fence shows and
// stores (lock names, guard keys, holders): printable UTF-8 that reads as
// it is, with nothing in it that a terminal or the dashboard would hide,
// reorder or draw differently. pkg/coord and pkg/guard wrap its errors in
// coord.ErrInvalid.
package printable

import (
	"fmt"
	"unicode"
	"unicode/utf8"
)

// Check returns why s, named what in the message ("lock name", "guard
// key"), is not 1 to maxLen bytes of printable UTF-8, or nil. Refused are:
//
//   - control characters (Unicode category Cc: NUL, tab, newline, DEL, the
//     C1 controls) and the line and paragraph separators (Zl, Zp);
//   - invisible format characters (Cf): bidirectional overrides and
//     isolates (U+202A–U+202E, U+2066–U+2069), zero-width spaces and joiners
//     (U+200B–U+200D, U+2060, U+FEFF), the soft hyphen, tag characters;
//   - the other characters that Unicode says to render as nothing (the
//     default ignorable code points that are letters or marks: Hangul
//     fillers, the combining grapheme joiner, variation selectors);
//   - private-use characters (Co), whose look depends on the font, and
//     unassigned code points (Cn), which terminals draw as they please.
//
// Surrogates cannot occur: they are not valid UTF-8, which is refused.
// Everything else that unicode.IsGraphic accepts is allowed: letters,
// marks, digits, punctuation, symbols and spaces (U+00A0 and U+3000 too:
// they are drawn, as spaces); `/` has no meaning.
func Check(what, s string, maxLen int) error {
	switch {
	case s == "":
		return fmt.Errorf("%s is empty", what)
	case len(s) > maxLen:
		return fmt.Errorf("%s is %d bytes, the limit is %d", what, len(s), maxLen)
	case !utf8.ValidString(s):
		return fmt.Errorf("%s %q is not valid UTF-8", what, s)
	}
	for _, r := range s {
		if kind := refused(r); kind != "" {
			return fmt.Errorf("%s %+q contains %s %U", what, s, kind, r)
		}
	}
	return nil
}

// refused says what kind of character r is when it is refused, else "".
func refused(r rune) string {
	if r >= 0x20 && r < 0x7f {
		return "" // printable ASCII, the common case
	}
	switch {
	case unicode.Is(unicode.Cc, r), unicode.Is(unicode.Zl, r), unicode.Is(unicode.Zp, r):
		return "control character"
	case unicode.Is(unicode.Cf, r):
		return "invisible format character"
	case unicode.Is(unicode.Other_Default_Ignorable_Code_Point, r), unicode.Is(unicode.Variation_Selector, r):
		return "invisible character"
	case unicode.Is(unicode.Co, r):
		return "private-use character"
	case !unicode.IsGraphic(r):
		return "unassigned code point"
	}
	return ""
}
