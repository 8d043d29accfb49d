package main

import (
	"testing"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/fence-dev/fence/cmd/fence/internal/scripttest"
)

// TestMain makes this test binary act as `fence` when testscript runs it
// under that name.
func TestMain(m *testing.M) {
	testscript.Main(m, scripttest.Commands)
}

// TestScript runs testdata/script/*.txtar on the local coordinator (see
// scripttest.Params). The etcd scripts are in testdata/etcd, run by
// internal/etcdit, whose test binary links an etcd server.
func TestScript(t *testing.T) {
	testscript.Run(t, scripttest.Params("testdata/script"))
}
