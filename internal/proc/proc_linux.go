package proc

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"sync"
	"syscall"

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
