package etcdproc

import "syscall"

// procAttr puts an etcd process in a group of its own and kills it when the
// test process dies.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
