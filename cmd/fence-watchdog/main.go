// Command fence-watchdog is the small watchdog of `fence run`: the process
// between fence and its command that stops the command when fence is frozen
// or killed (internal/supervise, WatchdogMain). Installed beside fence, it
// is what fence starts for every run instead of starting its own large
// binary a second time; it starts in a fraction of the time and memory.
// fence uses it only when its first report says hello in fence's protocol,
// and runs as its own watchdog otherwise (or when it is not installed).
//
// Build it with the tag that leaves everything but the watchdog out of
// package supervise, as releases do (goreleaser.yaml):
//
//	CGO_ENABLED=0 go build -tags fence_watchdog ./cmd/fence-watchdog
//
// Without the tag it is the same watchdog, as large as fence.
package main

import (
	"os"

	"github.com/fence-dev/fence/internal/supervise"
)

func main() { os.Exit(supervise.WatchdogMain(os.Args[1:])) }
