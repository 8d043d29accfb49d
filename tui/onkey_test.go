package tui

import (
	"testing"

	"github.com/fence-dev/fence/tui/keys"
)

// TestKeyReaderOf: ctrl+c goes before everything, an open question before
// the filter input, the filter input before the screen.
func TestKeyReaderOf(t *testing.T) {
	for _, c := range []struct {
		interrupt, revoke, limit, filtering bool
		want                                keyReader
	}{
		{false, false, false, false, readerScreen},
		{true, false, false, false, readerInterrupt},
		{true, true, true, true, readerInterrupt},
		{false, true, false, false, readerRevokeAnswer},
		{false, true, true, true, readerRevokeAnswer},
		{false, false, true, false, readerLimitAnswer},
		{false, false, true, true, readerLimitAnswer},
		{false, false, false, true, readerFilter},
	} {
		if got := keyReaderOf(c.interrupt, c.revoke, c.limit, c.filtering); got != c.want {
			t.Errorf("keyReaderOf(interrupt %v, revoke %v, limit %v, filtering %v) = %d, want %d",
				c.interrupt, c.revoke, c.limit, c.filtering, got, c.want)
		}
	}
}

// TestKeyAction: what each key does on each screen.
func TestKeyAction(t *testing.T) {
	k := keys.Default()
	for _, c := range []struct {
		md   mode
		key  string
		want action
	}{
		{modeTable, "q", actQuit},
		{modeTable, "ctrl+c", actQuit},
		{modeTable, "k", actUp},
		{modeTable, "up", actUp},
		{modeTable, "j", actDown},
		{modeTable, "down", actDown},
		{modeTable, "pgdown", actPageDown},
		{modeTable, " ", actPageDown},
		{modeTable, "g", actTop},
		{modeTable, "G", actBottom},
		{modeTable, "enter", actOpenDetails},
		{modeTable, "/", actFilter},
		{modeTable, "esc", actClearFilter},
		{modeTable, "backspace", actClearFilter},
		{modeTable, "s", actSort},
		{modeTable, "S", actReverse},
		{modeTable, "r", actRevoke},
		{modeTable, "f", actFreeze},
		{modeTable, "t", actThaw},
		{modeTable, "?", actHelp},
		{modeTable, "x", actNone},
		{modeTable, "y", actNone},

		{modeDetails, "q", actQuit},
		{modeDetails, "esc", actCloseDetails},
		{modeDetails, "enter", actCloseDetails},
		{modeDetails, "?", actDetailsHelp},
		{modeDetails, "k", actScrollUp},
		{modeDetails, "down", actScrollDown},
		{modeDetails, "pgdown", actScrollPgDown},
		{modeDetails, "g", actScrollTop},
		{modeDetails, "G", actScrollBottom},
		{modeDetails, "r", actRevoke},
		{modeDetails, "f", actFreeze},
		{modeDetails, "t", actThaw},
		{modeDetails, "/", actNone},
		{modeDetails, "s", actNone},

		{modeHelp, "q", actQuit},
		{modeHelp, "?", actCloseHelp},
		{modeHelp, "esc", actCloseHelp},
		{modeHelp, "backspace", actCloseHelp},
		{modeHelp, "enter", actNone},
		{modeHelp, "j", actNone},
		{modeHelp, "r", actNone},
	} {
		if got := keyAction(k, c.md, keyMsg(c.key)); got != c.want {
			t.Errorf("mode %d, key %q: action %q, want %q", c.md, c.key, got, c.want)
		}
	}
}

// TestEveryKeyHasAHandler: every action a screen binds is one onKey runs,
// and every key the help screen lists does something on the table.
func TestEveryKeyHasAHandler(t *testing.T) {
	k := keys.Default()
	for _, md := range []mode{modeTable, modeDetails, modeHelp} {
		for _, b := range screenKeys(k, md) {
			if keyHandlers[b.act] == nil {
				t.Errorf("mode %d: %q (%v) has no handler", md, b.act, b.key.Keys())
			}
		}
	}
	for _, col := range k.FullHelp() {
		for _, b := range col {
			if keyAction(k, modeTable, keyMsg(b.Keys()[0])) == actNone {
				t.Errorf("help lists %v, which does nothing on the table", b.Keys())
			}
		}
	}
}
