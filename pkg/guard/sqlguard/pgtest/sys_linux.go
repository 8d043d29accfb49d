package pgtest

import "syscall"

// setDeathSignal has sig sent to the server when the test process dies.
func setDeathSignal(a *syscall.SysProcAttr, sig syscall.Signal) { a.Pdeathsig = sig }
