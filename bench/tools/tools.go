//go:build tools

// Package tools pins the etcdctl 3.7 that the benchmark harness compares
// fence against. `go install go.etcd.io/etcd/etcdctl/v3@v3.7.3` is refused
// (etcdctl's go.mod has replace directives), so bench/run builds it from this
// module instead:
//
//	cd bench/tools && go build -o BIN go.etcd.io/etcd/etcdctl/v3
//
// This is its own module so that etcdctl's dependencies never enter fence's
// go.mod.
package tools

import _ "go.etcd.io/etcd/etcdctl/v3"
