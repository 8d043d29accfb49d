package clock

import (
	"os"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

func now() Boot {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		panic("clock_gettime(CLOCK_BOOTTIME): " + err.Error()) // cannot happen on Linux >= 2.6.39
	}
	return Boot(ts.Nano())
}

var bootIDOnce = sync.OnceValue(func() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
})

func bootID() string { return bootIDOnce() }
