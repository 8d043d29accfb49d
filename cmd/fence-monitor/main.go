// Command fence-monitor is fence with its two long-running programs linked
// in: the dashboard of `fence top` and the Prometheus exporter of `fence
// exporter`. Installed beside fence, it is what those two commands run (with
// the same arguments); the fence binary leaves Bubble Tea and client_golang
// out, so that every other command starts without their initialisation.
// fence-monitor refuses to stand in for a fence of another build.
//
//	CGO_ENABLED=0 go build ./cmd/fence-monitor
package main

import (
	"os"

	"github.com/fence-dev/fence/internal/cli"
	"github.com/fence-dev/fence/internal/monitor"
)

func main() { os.Exit(cli.MainWith(os.Args[1:], monitor.Hooks())) }
