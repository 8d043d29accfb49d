//go:build !linux

package supervise

import (
	"errors"
	"io"
	"syscall"
)

// Outside Linux there is no child subreaper, no cgroup and no parent-death
// signal: the watchdog stops the command's process group only, and a
// descendant that left the group is not found.

func becomeSubreaper() error { return nil }

func sysProcAttr(fg bool, cg *cgroup) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

func foreground(io.Reader) bool { return false }

func restoreForeground(int, int) {}

func watchdogProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

type cgroup struct {
	dir string
	fd  int
}

func ownCgroupDir() (string, error)             { return "", errors.ErrUnsupported }
func newCgroup(string, string) (*cgroup, error) { return nil, errors.ErrUnsupported }
func (c *cgroup) signal(syscall.Signal)         {}
func (c *cgroup) kill()                         {}
func (c *cgroup) populated() bool               { return false }
func (c *cgroup) remove() error                 { return nil }
func removeCgroupDir(string) error              { return nil }
func sweepCgroups(string, int)                  {}
