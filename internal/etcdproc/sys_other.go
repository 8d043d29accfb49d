//go:build !linux

package etcdproc

import "syscall"

// procAttr puts an etcd process in a group of its own (no parent-death
// signal outside Linux: a test process that dies leaves it running).
func procAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }
