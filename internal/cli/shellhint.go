package cli

import (
	"fmt"
	"strings"

	"github.com/fence-dev/fence/internal/exitcode"
)

// shellSyntax are the characters that make a command word a shell command
// line rather than a program's name.
const shellSyntax = " \t\n|;&<>$`()*?[]{}~'\"\\"

// commandExit is fence's exit after a supervised command (run, shards
// run) that ended with code: silent, or with err, the one line saying why
// fence did not run or stopped the command. To the "command not found"
// (127) of a command run without --shell whose word holds shell syntax
// ('echo hi | cat' given as one word) it adds that --shell runs it with
// /bin/sh -c.
func commandExit(code int, err error, command []string, shell bool) error {
	switch {
	case err == nil && code == 0:
		return nil
	case err == nil:
		return exitcode.Silent(code)
	case code == exitcode.NotFound && !shell && len(command) > 0 && strings.ContainsAny(command[0], shellSyntax):
		err = fmt.Errorf("%w (it holds shell syntax: give --shell to run it with /bin/sh -c)", err)
	}
	return exitcode.New(code, err)
}
