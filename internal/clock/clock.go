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

// FromMono converts a time.Time taken in this process (with a monotonic
// reading) to the boot clock.
func FromMono(t time.Time) Boot { return Now() - Boot(time.Since(t)) }

// Add returns b+d.
func (b Boot) Add(d time.Duration) Boot { return b + Boot(d) }

// Sub returns b-c as a duration.
func (b Boot) Sub(c Boot) time.Duration { return time.Duration(b - c) }

// Until is the time from now until b (negative when b has passed).
func Until(b Boot) time.Duration { return time.Duration(b - Now()) }

// BootID identifies the current boot ("" where unknown). Boot clock readings
// are comparable only under the same BootID.
func BootID() string { return bootID() }
