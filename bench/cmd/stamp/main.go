// Command stamp is the command that the handoff benchmark runs under each
// lock tool. It appends CLOCK_BOOTTIME stamps (one write(2) per line, to a
// file opened with O_APPEND) so that the harness can measure the gap from
// one holder's command ending to the next holder's command starting:
//
//	stamp LOG             append "S <ns> <pid>" at start, "E <ns> <pid>" at exit
//	stamp LOG hold FIFO   as above, but block between the two until FIFO is
//	                      opened for writing (the harness's "release now")
//	stamp noop            exit at once: the cost of starting a small Go program
//
// It imports almost nothing, so that the time from exec to its first stamp
// stays as small as a Go program allows; the harness measures that cost
// (`stamp noop`) and reports it beside the handoff figures.
package main

import (
	"fmt"
	"os"
	"strconv"

	"github.com/fence-dev/fence/internal/clock"
)

func main() {
	start := clock.Now()
	args := os.Args[1:]
	if len(args) == 1 && args[0] == "noop" {
		return
	}
	if len(args) != 1 && (len(args) != 3 || args[1] != "hold") {
		fmt.Fprintln(os.Stderr, "usage: stamp LOG [hold FIFO] | stamp noop")
		os.Exit(2)
	}
	f, err := os.OpenFile(args[0], os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		fmt.Fprintln(os.Stderr, "stamp:", err)
		os.Exit(1)
	}
	pid := strconv.Itoa(os.Getpid())
	write(f, "S", start, pid)
	if len(args) == 3 {
		// Opening a FIFO for reading blocks until a writer opens it.
		fifo, err := os.OpenFile(args[2], os.O_RDONLY, 0)
		if err != nil {
			fmt.Fprintln(os.Stderr, "stamp:", err)
			os.Exit(1)
		}
		fifo.Close()
	}
	write(f, "E", clock.Now(), pid)
}

func write(f *os.File, kind string, t clock.Boot, pid string) {
	line := kind + " " + strconv.FormatInt(int64(t), 10) + " " + pid + "\n"
	if _, err := f.WriteString(line); err != nil {
		fmt.Fprintln(os.Stderr, "stamp:", err)
		os.Exit(1)
	}
}
