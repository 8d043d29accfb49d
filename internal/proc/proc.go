// Package proc gives fence the Linux process facts it needs to hand a lock
// over safely on one host: the start time of a PID (so that a reused PID is
// not mistaken for the process that held a lease), liveness, the members of a
// process group, signalling a group, and waiting for a process to exit
// through a pidfd, without polling.
//
// A process is named by an ID: its PID and its start time. Every check
// compares both, so a PID that was reused by a new process reads as gone.
// Zombies (exited, not yet reaped) count as gone: they run no code.
//
// The package reads /proc and uses pidfd_open(2) (Linux 5.3 and later).
// Elsewhere every function returns an error wrapping errors.ErrUnsupported.
package proc

import (
	"errors"
	"fmt"
)

// ErrNoProcess means the process (or every member of the process group) is
// gone.
var ErrNoProcess = errors.New("no such process")

// ID identifies one process across PID reuse.
type ID struct {
	PID int `json:"pid"`
	// Start is the start time in clock ticks after boot (field 22 of
	// /proc/PID/stat). Start 0 matches no live process.
	Start uint64 `json:"start"`
}

func (id ID) String() string { return fmt.Sprintf("%d@%d", id.PID, id.Start) }

// Stat is what fence reads from /proc/PID/stat.
type Stat struct {
	PID   int
	State byte // R, S, D, Z, T, t, X, ...
	PPID  int
	PGID  int
	SID   int
	Start uint64 // clock ticks after boot
}

// ID returns the process's identity.
func (s Stat) ID() ID { return ID{PID: s.PID, Start: s.Start} }

// Gone reports whether the process has exited: a zombie or a dead task.
func (s Stat) Gone() bool { return s.State == 'Z' || s.State == 'X' || s.State == 'x' }

// Stopped reports whether the process is stopped by a signal (SIGSTOP,
// SIGTSTP) or by a tracer: it runs no code until continued.
func (s Stat) Stopped() bool { return s.State == 'T' || s.State == 't' }

// Status is the state of a process named by an ID.
type Status int

const (
	// Gone: no process has that PID and start time, or it is a zombie.
	Gone Status = iota
	// Running: alive and not stopped (it may be sleeping).
	Running
	// Stopped: alive but stopped by a signal or a tracer.
	Stopped
)

func (s Status) String() string {
	switch s {
	case Running:
		return "running"
	case Stopped:
		return "stopped"
	default:
		return "gone"
	}
}

// Check returns the status of id. A process that cannot be read counts as
// gone.
func Check(id ID) Status {
	if id.PID <= 0 || id.Start == 0 {
		return Gone
	}
	st, err := ReadStat(id.PID)
	if err != nil || st.Start != id.Start || st.Gone() {
		return Gone
	}
	if st.Stopped() {
		return Stopped
	}
	return Running
}

// Alive reports whether id names a live process (running or stopped, not a
// zombie).
func (id ID) Alive() bool { return Check(id) != Gone }
