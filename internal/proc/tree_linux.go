package proc

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// Descendants returns the processes descended from root (its children, their
// children, and so on), breadth first, root itself excluded. Zombies are
// included (Stat.Gone reports them): a caller that is their parent, or their
// subreaper, reaps them.
//
// The result is a snapshot: processes may start and end while /proc is read.
// A caller that must leave no descendant behind signals and reads again
// until none is left (see SignalDescendants).
func Descendants(root int) ([]Stat, error) {
	all, err := snapshot()
	if err != nil {
		return nil, err
	}
	children := make(map[int][]Stat, len(all))
	for _, st := range all {
		children[st.PPID] = append(children[st.PPID], st)
	}
	var out []Stat
	queue := []int{root}
	seen := map[int]bool{root: true}
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		for _, c := range children[pid] {
			if seen[c.PID] {
				continue // cannot happen in a consistent tree; guards a torn read
			}
			seen[c.PID] = true
			out = append(out, c)
			queue = append(queue, c.PID)
		}
	}
	return out, nil
}

// SignalDescendants sends sig to every live descendant of root for which skip
// (when not nil) returns false, and returns how many processes it
// signalled. Each one is signalled through a pidfd
// whose process is checked against the start time read from /proc, so a PID
// that was reused by an unrelated process after the snapshot is never
// signalled. Processes that are gone by the time they are signalled are
// skipped silently.
func SignalDescendants(root int, sig syscall.Signal, skip func(Stat) bool) (int, error) {
	ds, err := Descendants(root)
	if err != nil {
		return 0, err
	}
	n := 0
	var firstErr error
	for _, st := range ds {
		if st.Gone() || (skip != nil && skip(st)) {
			continue
		}
		switch err := SignalID(st.ID(), sig); {
		case err == nil:
			n++
		case errors.Is(err, ErrNoProcess):
		default:
			if firstErr == nil {
				firstErr = err
			}
		}
	}
	return n, firstErr
}

// SignalID sends sig to the process id only when the process that holds
// id.PID now is the one that started at id.Start (through a pidfd, so a
// reused PID is never signalled). An error wraps ErrNoProcess when it is
// gone, os.ErrPermission when it may not be signalled.
func SignalID(id ID, sig syscall.Signal) error {
	fd, err := unix.PidfdOpen(id.PID, 0)
	if err != nil {
		if errors.Is(err, unix.ESRCH) {
			return fmt.Errorf("process %d: %w", id.PID, ErrNoProcess)
		}
		if errors.Is(err, unix.ENOSYS) {
			// Kernels before 5.3: check, then signal (a narrow race).
			if Check(id) == Gone {
				return fmt.Errorf("process %d: %w", id.PID, ErrNoProcess)
			}
			return killErr(fmt.Sprintf("signal process %d", id.PID), unix.Kill(id.PID, sig))
		}
		return fmt.Errorf("pidfd_open %d: %w", id.PID, err)
	}
	defer unix.Close(fd)
	// The pidfd names whichever process had the PID when it was opened: it
	// is ours if that process still has the start time we read.
	st, err := ReadStat(id.PID)
	if err != nil || st.Start != id.Start {
		return fmt.Errorf("process %d: %w", id.PID, ErrNoProcess)
	}
	return killErr(fmt.Sprintf("signal process %d", id.PID), unix.PidfdSendSignal(fd, sig, nil, 0))
}

// killErr is the error of a kill of what (ESRCH: ErrNoProcess, EPERM:
// os.ErrPermission).
func killErr(what string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, unix.ESRCH):
		return fmt.Errorf("%s: %w", what, ErrNoProcess)
	case errors.Is(err, unix.EPERM):
		return fmt.Errorf("%s: %w", what, os.ErrPermission)
	default:
		return fmt.Errorf("%s: %w", what, err)
	}
}

// snapshot reads the stat of every process in /proc. Processes that end
// while it reads are skipped.
func snapshot() ([]Stat, error) {
	d, err := os.Open("/proc")
	if err != nil {
		return nil, err
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return nil, err
	}
	out := make([]Stat, 0, len(names))
	for _, n := range names {
		pid, err := strconv.Atoi(n)
		if err != nil {
			continue
		}
		st, err := ReadStat(pid)
		if err != nil {
			continue
		}
		out = append(out, st)
	}
	return out, nil
}
