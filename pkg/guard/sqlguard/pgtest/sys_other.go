//go:build !linux

package pgtest

import "syscall"

// setDeathSignal does nothing outside Linux, which has no parent-death
// signal: a test process that dies leaves the server running.
func setDeathSignal(*syscall.SysProcAttr, syscall.Signal) {}
