package tui

import "testing"

// TestWhoReadsAKey: ctrl+c goes before everything, an open question
// before the filter input, the filter input before the screen (onKey; was
// TestKeyReaderOf, with the same cases).
func TestWhoReadsAKey(t *testing.T) {
	for _, c := range []struct {
		interrupt, revoke, limit, filtering bool
		want                                string // answer: a revoke or a limit asked
	}{
		{false, false, false, false, "screen"},
		{true, false, false, false, "interrupt"},
		{true, true, true, true, "interrupt"},
		{false, true, false, false, "answer"},
		{false, true, true, true, "answer"},
		{false, false, true, false, "answer"},
		{false, false, true, true, "answer"},
		{false, false, false, true, "filter"},
	} {
		m := New(t.Context(), newFake(sampleLocks()...), Options{Now: fixedClock})
		if c.revoke || c.limit {
			m.asking = &question{what: "revoke"}
		}
		if c.filtering {
			m.startFilter()
		}
		k := "x"
		if c.interrupt {
			k = "ctrl+c"
		}
		m.onKey(keyMsg(k))
		got := "screen"
		switch {
		case m.ctx.Err() != nil:
			got = "interrupt"
		case (c.revoke || c.limit) && m.asking == nil && m.flash == "revoke cancelled":
			got = "answer"
		case m.filter.Value() == "x":
			got = "filter"
		}
		if got != c.want {
			t.Errorf("key %q (revoke %v, limit %v, filtering %v) read by the %s, want the %s",
				k, c.revoke, c.limit, c.filtering, got, c.want)
		}
	}
}

// TestKeyAction: what each key does on each screen.
func TestKeyAction(t *testing.T) {
	k := defaultKeys()
	for _, c := range []struct {
		md   mode
		key  string
		want string
	}{
		{modeTable, "q", "quit"},
		{modeTable, "ctrl+c", "quit"},
		{modeTable, "k", "up"},
		{modeTable, "up", "up"},
		{modeTable, "j", "down"},
		{modeTable, "down", "down"},
		{modeTable, "pgdown", "page down"},
		{modeTable, " ", "page down"},
		{modeTable, "g", "top"},
		{modeTable, "G", "bottom"},
		{modeTable, "enter", "open details"},
		{modeTable, "/", "filter"},
		{modeTable, "esc", "clear filter"},
		{modeTable, "backspace", "clear filter"},
		{modeTable, "s", "sort"},
		{modeTable, "S", "reverse"},
		{modeTable, "r", "revoke"},
		{modeTable, "f", "freeze"},
		{modeTable, "t", "thaw"},
		{modeTable, "?", "help"},
		{modeTable, "x", ""},
		{modeTable, "y", ""},

		{modeDetails, "q", "quit"},
		{modeDetails, "esc", "close details"},
		{modeDetails, "enter", "close details"},
		{modeDetails, "?", "help from details"},
		{modeDetails, "k", "scroll up"},
		{modeDetails, "down", "scroll down"},
		{modeDetails, "pgdown", "scroll page down"},
		{modeDetails, "g", "scroll top"},
		{modeDetails, "G", "scroll bottom"},
		{modeDetails, "r", "revoke"},
		{modeDetails, "f", "freeze"},
		{modeDetails, "t", "thaw"},
		{modeDetails, "/", ""},
		{modeDetails, "s", ""},

		{modeHelp, "q", "quit"},
		{modeHelp, "?", "close help"},
		{modeHelp, "esc", "close help"},
		{modeHelp, "backspace", "close help"},
		{modeHelp, "enter", ""},
		{modeHelp, "j", ""},
		{modeHelp, "r", ""},
	} {
		if got := keyAction(k, c.md, keyMsg(c.key)).act; got != c.want {
			t.Errorf("mode %d, key %q: action %q, want %q", c.md, c.key, got, c.want)
		}
	}
}

// TestEveryKeyHasAHandler: every action a screen binds is one onKey runs,
// and every key the help screen lists does something on the table.
func TestEveryKeyHasAHandler(t *testing.T) {
	k := defaultKeys()
	for _, md := range []mode{modeTable, modeDetails, modeHelp} {
		for _, b := range screenKeys(k, md) {
			if b.run == nil {
				t.Errorf("mode %d: %q (%v) has no handler", md, b.act, b.key.Keys())
			}
		}
	}
	for _, col := range k.FullHelp() {
		for _, b := range col {
			if keyAction(k, modeTable, keyMsg(b.Keys()[0])).run == nil {
				t.Errorf("help lists %v, which does nothing on the table", b.Keys())
			}
		}
	}
}
