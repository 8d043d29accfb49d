//go:build tools

// Package tools pins the etcd 3.7 server that the three-member cluster tests
// (test/cluster) run as separate processes beside Debian's etcd 3.4:
//
//	cd test/cluster/tools && go build -o BIN go.etcd.io/etcd/server/v3
//
// (.ci/run builds it into $HOME/.cache/fence-test/etcd-3.7.3). It is a module
// of its own so that the server's dependencies never enter fence's go.mod.
package tools

import _ "go.etcd.io/etcd/server/v3"
