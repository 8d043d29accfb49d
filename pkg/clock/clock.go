// Package clock gives fence a clock that does not jump and is comparable
// across processes on one host: CLOCK_BOOTTIME on Linux (monotonic, counts
// time spent suspended, system-wide). Lease deadlines that cross a process
// boundary (fence to its watchdog, one local holder to its successor) are
// expressed on it.
package clock

import "time"

// Boot is a reading of the boot clock: nanoseconds since boot.
type Boot int64

// Now reads the boot clock.
func Now() Boot { return now() }

// A time.Time t taken in this process is Now().Add(-time.Since(t)) on the
// boot clock; the time until b is b.Sub(Now()).

// Add returns b+d.
func (b Boot) Add(d time.Duration) Boot { return b + Boot(d) }

// Sub returns b-c as a duration.
func (b Boot) Sub(c Boot) time.Duration { return time.Duration(b - c) }
