package cli

import (
	"fmt"
	"strings"

	"github.com/fence-dev/fence/internal/exitcode"
)

// shellSyntax are the characters that make a command word a shell command
// line rather than a program's name.
const shellSyntax = " \t\n|;&<>$`()*?[]{}~'\"\\"

// shellHint adds to the "command not found" (127) of a command run without
// --shell whose word holds shell syntax ('echo hi | cat' given as one word)
// that --shell runs it with /bin/sh -c.
func shellHint(err error, code int, command []string, shell bool) error {
	if err == nil || code != exitcode.NotFound || shell || len(command) == 0 || !strings.ContainsAny(command[0], shellSyntax) {
		return err
	}
	return fmt.Errorf("%w (it holds shell syntax: give --shell to run it with /bin/sh -c)", err)
}
