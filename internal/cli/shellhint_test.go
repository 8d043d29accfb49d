package cli

import (
	"errors"
	"strings"
	"testing"

	"github.com/fence-dev/fence/internal/exitcode"
)

// TestShellHint: a command word with shell syntax that is not found gets
// the --shell hint; a plain name, another code, --shell, or syntax in a
// later argument do not.
func TestShellHint(t *testing.T) {
	notFound := errors.New("x: command not found")
	for _, c := range []struct {
		cmd   []string
		code  int
		shell bool
		hint  bool
	}{
		{[]string{"echo hi | cat"}, exitcode.NotFound, false, true},
		{[]string{"a;b"}, exitcode.NotFound, false, true},
		{[]string{"make>log"}, exitcode.NotFound, false, true},
		{[]string{"$HOME/bin/x"}, exitcode.NotFound, false, true},
		{[]string{"`date`"}, exitcode.NotFound, false, true},
		{[]string{"a&"}, exitcode.NotFound, false, true},
		{[]string{"no-such-command"}, exitcode.NotFound, false, false},
		{[]string{"prog", "a | b"}, exitcode.NotFound, false, false},
		{[]string{"echo hi | cat"}, exitcode.CannotExec, false, false},
		{[]string{"echo hi | cat"}, exitcode.NotFound, true, false},
	} {
		err := commandExit(c.code, notFound, c.cmd, c.shell)
		if got := strings.Contains(err.Error(), "give --shell"); got != c.hint || !errors.Is(err, notFound) || exitcode.Code(err) != c.code {
			t.Errorf("commandExit(%d, %q, shell %v) = %v; want hint %v", c.code, c.cmd, c.shell, err, c.hint)
		}
	}
}
