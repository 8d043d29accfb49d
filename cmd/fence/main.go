// Command fence takes leases on named locks, runs commands under them and
// hands them fencing tokens. See `fence --help` and docs/cli.
package main

import (
	"os"

	"github.com/fence-dev/fence/internal/cli"
)

func main() {
	os.Exit(cli.Main(os.Args[1:]))
}
