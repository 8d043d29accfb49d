package clock

import "golang.org/x/sys/unix"

func now() Boot {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		panic("clock_gettime(CLOCK_BOOTTIME): " + err.Error()) // cannot happen on Linux >= 2.6.39
	}
	return Boot(ts.Nano())
}
