package proc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// ReadStat reads /proc/PID/stat. A missing process gives an error wrapping
// ErrNoProcess.
func ReadStat(pid int) (Stat, error) {
	if pid <= 0 {
		return Stat{}, fmt.Errorf("process %d: %w", pid, ErrNoProcess)
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH) {
			return Stat{}, fmt.Errorf("process %d: %w", pid, ErrNoProcess)
		}
		return Stat{}, fmt.Errorf("process %d: %w", pid, err)
	}
	st, err := parseStat(b)
	if err != nil {
		return Stat{}, fmt.Errorf("process %d: %w", pid, err)
	}
	return st, nil
}

// parseStat parses the contents of /proc/PID/stat. The command name (field
// 2) is in parentheses and may itself contain spaces and parentheses, so the
// fields are counted from the last ')'.
func parseStat(b []byte) (Stat, error) {
	open := bytes.IndexByte(b, '(')
	closing := bytes.LastIndexByte(b, ')')
	if open < 1 || closing < open {
		return Stat{}, errors.New("malformed /proc stat")
	}
	pid, err := strconv.Atoi(string(bytes.TrimSpace(b[:open])))
	if err != nil {
		return Stat{}, errors.New("malformed /proc stat: pid")
	}
	f := bytes.Fields(b[closing+1:])
	// f[0] is field 3 (state); field N is f[N-3]. starttime is field 22.
	if len(f) < 20 || len(f[0]) != 1 {
		return Stat{}, errors.New("malformed /proc stat: too few fields")
	}
	st := Stat{PID: pid, State: f[0][0]}
	ints := []*int{&st.PPID, &st.PGID, &st.SID}
	for i, p := range ints {
		if *p, err = strconv.Atoi(string(f[1+i])); err != nil {
			return Stat{}, fmt.Errorf("malformed /proc stat: field %d", 4+i)
		}
	}
	if st.Start, err = strconv.ParseUint(string(f[19]), 10, 64); err != nil {
		return Stat{}, errors.New("malformed /proc stat: starttime")
	}
	return st, nil
}

// Lookup returns the identity of the live process pid. A missing process or a
// zombie gives an error wrapping ErrNoProcess.
func Lookup(pid int) (ID, error) {
	st, err := ReadStat(pid)
	if err != nil {
		return ID{}, err
	}
	if st.Gone() {
		return ID{}, fmt.Errorf("process %d has exited: %w", pid, ErrNoProcess)
	}
	return st.ID(), nil
}

var self = sync.OnceValues(func() (ID, error) { return Lookup(os.Getpid()) })

// Self returns the identity of the calling process.
func Self() (ID, error) { return self() }

// GroupMembers returns the live processes (zombies excluded) whose process
// group is pgid.
//
// When leader is not the zero ID it is the group leader as recorded when the
// group was known (leader.PID == pgid); a leader recorded with Start 0 was
// already gone then. If a live process with PID pgid now has a different
// start time, the PGID number was reused by an unrelated process, and the
// recorded group has no members: the kernel does not reuse a PID while a
// process group of that number still exists.
func GroupMembers(pgid int, leader ID) ([]ID, error) {
	if pgid <= 0 {
		return nil, fmt.Errorf("process group %d: %w", pgid, ErrNoProcess)
	}
	if leader != (ID{}) {
		if st, err := ReadStat(pgid); err == nil && !st.Gone() && st.Start != leader.Start {
			return nil, nil
		}
	}
	all, err := snapshot()
	if err != nil {
		return nil, err
	}
	var out []ID
	for _, st := range all {
		if st.PGID == pgid && !st.Gone() {
			out = append(out, st.ID())
		}
	}
	return out, nil
}

// SignalGroup sends sig to every process of the group pgid. It returns nil
// when at least one member got the signal, an error wrapping ErrNoProcess
// when the group has no member, and an error wrapping os.ErrPermission when
// the caller may not signal any member (another user's processes, and the
// caller is not root).
func SignalGroup(pgid int, sig syscall.Signal) error {
	if pgid <= 1 {
		return fmt.Errorf("signal process group %d: invalid group", pgid)
	}
	return killErr(fmt.Sprintf("signal process group %d", pgid), unix.Kill(-pgid, sig))
}

var pidNS = sync.OnceValue(func() string {
	ns, err := os.Readlink("/proc/self/ns/pid")
	if err != nil {
		return ""
	}
	return ns
})

// PIDNamespace identifies the PID namespace of the calling process (as
// "pid:[4026531836]"), or "" when it cannot be read. PIDs, and so IDs, mean
// the same process only within one PID namespace.
func PIDNamespace() string { return pidNS() }

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
	fd, err := pidfd(id, 0)
	if errors.Is(err, unix.ENOSYS) {
		// Kernels before 5.3: check, then signal (a narrow race).
		if Check(id) == Gone {
			return fmt.Errorf("process %d: %w", id.PID, ErrNoProcess)
		}
		return killErr(fmt.Sprintf("signal process %d", id.PID), unix.Kill(id.PID, sig))
	}
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return killErr(fmt.Sprintf("signal process %d", id.PID), unix.PidfdSendSignal(fd, sig, nil, 0))
}

// pidfd opens a pidfd for id with flags; an error wraps ErrNoProcess when
// id is gone. The pidfd names whichever process had the PID when it was
// opened: it is ours if that process still has the start time we read (if
// ours had exited and the PID was reused before the open, the start
// differs).
func pidfd(id ID, flags int) (int, error) {
	fd, err := unix.PidfdOpen(id.PID, flags)
	if errors.Is(err, unix.ESRCH) {
		return -1, fmt.Errorf("process %d: %w", id.PID, ErrNoProcess)
	}
	if err != nil {
		return -1, fmt.Errorf("pidfd_open %d: %w", id.PID, err)
	}
	if st, err := ReadStat(id.PID); err != nil || st.Start != id.Start {
		unix.Close(fd)
		return -1, fmt.Errorf("process %d: %w", id.PID, ErrNoProcess)
	}
	return fd, nil
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

// WaitExit blocks until the process id has exited (or was already gone) and
// returns nil, or returns ctx.Err() when ctx ends first. It works for any
// process, not only children: it waits on a pidfd through the Go runtime's
// poller, with no polling loop and no thread blocked.
func WaitExit(ctx context.Context, id ID) error {
	_, err := WaitAny(ctx, id)
	return err
}

// WaitAny blocks until one of ids has exited and returns it, or returns
// ctx.Err() when ctx ends first. With no ids it waits for ctx.
func WaitAny(ctx context.Context, ids ...ID) (ID, error) {
	files := make([]*os.File, 0, len(ids))
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	for _, id := range ids {
		f, err := openPidfd(id)
		if errors.Is(err, ErrNoProcess) {
			return id, nil
		}
		if err != nil {
			return ID{}, err
		}
		files = append(files, f)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	first := make(chan int, len(files))
	var wg sync.WaitGroup
	for i, f := range files {
		wg.Go(func() {
			if waitReadable(ctx, f) == nil {
				first <- i
			}
		})
	}
	select {
	case i := <-first:
		cancel()
		wg.Wait()
		return ids[i], nil
	case <-ctx.Done():
	}
	wg.Wait()
	select {
	case i := <-first: // exited just as ctx ended: report the exit
		return ids[i], nil
	default:
		return ID{}, ctx.Err()
	}
}

// openPidfd opens a pidfd for id, registered with the runtime poller. An
// error wraps ErrNoProcess when id is already gone (including a PID now used
// by another process).
func openPidfd(id ID) (*os.File, error) {
	if id.PID <= 0 || id.Start == 0 {
		return nil, fmt.Errorf("process %v: %w", id, ErrNoProcess)
	}
	fd, err := pidfd(id, unix.PIDFD_NONBLOCK)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), "pidfd"), nil
}

// waitReadable waits until the pidfd f polls readable (the process exited).
func waitReadable(ctx context.Context, f *os.File) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	stop := context.AfterFunc(ctx, func() { f.SetReadDeadline(time.Unix(1, 0)) })
	defer stop()
	var perr error
	err = rc.Read(func(fd uintptr) bool {
		for {
			pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
			n, err := unix.Poll(pfd, 0)
			if errors.Is(err, unix.EINTR) {
				continue
			}
			if err != nil {
				perr = err
				return true
			}
			return n > 0
		}
	})
	if errors.Is(err, os.ErrDeadlineExceeded) {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return err
	}
	if err != nil {
		return err
	}
	if perr != nil {
		return fmt.Errorf("poll pidfd: %w", perr)
	}
	return nil
}
