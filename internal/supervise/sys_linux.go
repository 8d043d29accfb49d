package supervise

import (
	"io"
	"os"
	"syscall"

	"github.com/mattn/go-isatty"
	"golang.org/x/sys/unix"
)

func becomeSubreaper() error { return unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) }

// sysProcAttr puts the command in a process group of its own (in the
// foreground of the terminal on stdin when asked), in cg when not nil, and
// has it killed when the watchdog dies.
func sysProcAttr(fg bool, cg *cgroup) *syscall.SysProcAttr {
	a := &syscall.SysProcAttr{
		Setpgid:   true,
		Pdeathsig: syscall.SIGKILL, // the command's main process dies with the watchdog
	}
	if fg {
		a.Foreground, a.Ctty = true, 0
	}
	if cg != nil {
		a.UseCgroupFD, a.CgroupFD = true, cg.fd
	}
	return a
}

// foreground reports whether the command should get the terminal: stdin is
// a terminal whose foreground process group is fence's. A command in a
// background group that reads the terminal would be stopped (SIGTTIN).
func foreground(stdin io.Reader) bool {
	f, ok := stdin.(*os.File)
	if !ok || !isatty.IsTerminal(f.Fd()) {
		return false
	}
	pg, err := unix.IoctlGetInt(int(f.Fd()), unix.TIOCGPGRP)
	return err == nil && pg == unix.Getpgrp()
}

// watchdogProcAttr puts the watchdog in a process group of its own, in
// fence's session (it keeps the controlling terminal, so that it can give
// it to the command).
func watchdogProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

// restoreForeground gives the terminal on stdin back to fence's process
// group, pgrp, after the command's group, from, which had it, ended; not
// when someone else took it meanwhile (a shell whose job, fence, stopped or
// died). SIGTTOU is blocked on this thread meanwhile: the watchdog's own
// group, in the background, may then set the terminal's foreground.
func restoreForeground(pgrp, from int) {
	if pgrp <= 0 {
		return
	}
	if fg, err := unix.IoctlGetInt(0, unix.TIOCGPGRP); err != nil || fg != from {
		return
	}
	var old, block unix.Sigset_t
	block.Val[0] = 1 << (uint(syscall.SIGTTOU) - 1)
	if unix.PthreadSigmask(unix.SIG_BLOCK, &block, &old) != nil {
		return
	}
	defer func() { _ = unix.PthreadSigmask(unix.SIG_SETMASK, &old, nil) }()
	_ = unix.IoctlSetPointerInt(0, unix.TIOCSPGRP, pgrp)
}
