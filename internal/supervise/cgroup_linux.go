package supervise

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fence-dev/fence/internal/proc"
	"github.com/fence-dev/fence/pkg/clock"
)

// cgroup is a cgroup v2 made for one command: every process the command
// starts stays in it (leaving it takes privileges the command normally does
// not use), so the whole tree can be signalled and killed at once
// (cgroup.kill), whatever setsid or double forks it did.
// It is created under the watchdog's own cgroup v2 where the machine allows
// (see the package doc); elsewhere the watchdog falls back to what a child
// subreaper sees.
type cgroup struct {
	dir string
	fd  int // O_PATH-like directory fd for clone3(CLONE_INTO_CGROUP)
}

// sweepCgroups removes the cgroups under base that watchdogs made and left
// behind: a watchdog removes its cgroup when the command's tree is gone,
// and fence does when the watchdog dies first; when both are killed at once
// (kill -9 of both, the OOM killer), the empty directory would stay until
// the next boot.
//
// A cgroup is left alone while its maker may live: a process with the PID
// in its name that started no later than the time in its name (and any
// cgroup younger than sweepAge). Only an empty cgroup can be removed (rmdir
// fails on one with a process in it), and a mistake could only cost a live
// watchdog its cgroup, whose command then starts without one (start's
// fallback); the errors of the start-time comparison (clock ticks, a kernel
// whose start times leave out suspends) all lean to leaving a cgroup.
func sweepCgroups(base string, self int) {
	entries, _ := os.ReadDir(base)
	now := clock.Now()
	for _, e := range entries {
		name := e.Name()
		rest, ok := strings.CutPrefix(name, cgroupPrefix)
		if !ok || !e.IsDir() {
			continue
		}
		p, t, ok := strings.Cut(rest, "-")
		pid, err1 := strconv.Atoi(p)
		made, err2 := strconv.ParseUint(t, 10, 64)
		if !ok || err1 != nil || err2 != nil || pid <= 0 || pid == self || uint64(now) < made+uint64(sweepAge) {
			continue // not one of ours, or made a moment ago: its maker may be about to start a command in it
		}
		if st, err := proc.ReadStat(pid); err == nil && !st.Gone() && st.Start*uint64(time.Second/ticksPerSecond) <= made {
			continue // its maker may be alive
		}
		_ = unix.Rmdir(filepath.Join(base, name))
	}
}

// sweepAge is how old a cgroup must be (by the time in its name) before
// sweepCgroups looks at its maker: younger, it is left alone even when its
// maker seems gone (a watchdog in another PID namespace, whose PID means
// another process here, between its mkdir and its command's start).
const sweepAge = 2 * time.Second

// ticksPerSecond is the unit of a process's start time in /proc/PID/stat
// (USER_HZ, 100 on every Linux architecture fence is built for).
const ticksPerSecond = 100

// newCgroup creates the cgroup name under base, the caller's own cgroup v2
// (ownCgroupDir).
func newCgroup(base, name string) (*cgroup, error) {
	dir := filepath.Join(base, name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create cgroup: %w", err)
	}
	fd, err := unix.Open(dir, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		_ = os.Remove(dir)
		return nil, fmt.Errorf("open cgroup: %w", err)
	}
	return &cgroup{dir: dir, fd: fd}, nil
}

// ownCgroupDir finds the directory of the calling process's cgroup v2.
func ownCgroupDir() (string, error) {
	mount, root, err := cgroup2Mount()
	if err != nil {
		return "", err
	}
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", err
	}
	var own string
	found := false
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "0::"); ok {
			own, found = rest, true
			break
		}
	}
	if !found {
		return "", errors.New("no cgroup v2 entry in /proc/self/cgroup")
	}
	rel, ok := strings.CutPrefix(own, root)
	if root == "/" {
		rel, ok = own, true
	}
	if !ok || strings.Contains(own, "(deleted)") {
		return "", fmt.Errorf("cgroup %q is not under the cgroup2 mount's root %q", own, root)
	}
	return filepath.Join(mount, rel), nil
}

// cgroup2Mount returns the mount point and mounted root of the first cgroup2
// file system in /proc/self/mountinfo.
func cgroup2Mount() (mount, root string, err error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// id parent maj:min root mountpoint opts [optional...] - fstype source superopts
		fields := strings.Fields(sc.Text())
		sep := slices.Index(fields, "-")
		if sep < 5 || sep+1 >= len(fields) || fields[sep+1] != "cgroup2" {
			continue
		}
		return unescapeMount(fields[4]), unescapeMount(fields[3]), nil
	}
	return "", "", errors.New("no cgroup2 file system is mounted")
}

// unescapeMount undoes the octal escapes of /proc/self/mountinfo.
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// procs lists the processes in the cgroup.
func (c *cgroup) procs() ([]int, error) {
	b, err := os.ReadFile(filepath.Join(c.dir, "cgroup.procs"))
	if err != nil {
		return nil, err
	}
	var out []int
	for _, f := range bytes.Fields(b) {
		if pid, err := strconv.Atoi(string(f)); err == nil {
			out = append(out, pid)
		}
	}
	return out, nil
}

// signal sends sig to every process in the cgroup.
func (c *cgroup) signal(sig syscall.Signal) {
	pids, _ := c.procs()
	for _, pid := range pids {
		_ = unix.Kill(pid, sig)
	}
}

// kill kills every process in the cgroup with SIGKILL, atomically through
// cgroup.kill (Linux 5.14+), else one by one.
func (c *cgroup) kill() {
	if err := os.WriteFile(filepath.Join(c.dir, "cgroup.kill"), []byte("1"), 0); err == nil {
		return
	}
	c.signal(syscall.SIGKILL)
}

// populated reports whether a live process is left in the cgroup
// (cgroup.events is there since Linux 4.5; a command gets a cgroup only
// from 5.7 on, with clone3's CLONE_INTO_CGROUP).
func (c *cgroup) populated() bool {
	b, _ := os.ReadFile(filepath.Join(c.dir, "cgroup.events"))
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "populated "); ok {
			return strings.TrimSpace(v) != "0"
		}
	}
	return false
}

// remove deletes the cgroup once it is empty (it retries for a short while:
// the kernel empties a cgroup slightly after its last process exits).
func (c *cgroup) remove() error {
	if c.fd >= 0 {
		_ = unix.Close(c.fd)
		c.fd = -1
	}
	return removeCgroupDir(c.dir)
}

func removeCgroupDir(dir string) error {
	var err error
	for range 50 {
		if err = unix.Rmdir(dir); err == nil || errors.Is(err, unix.ENOENT) {
			return nil
		}
		if !errors.Is(err, unix.EBUSY) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	return fmt.Errorf("remove cgroup %s: %w", dir, err)
}
