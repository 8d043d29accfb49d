//go:build linux

package supervise_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/fence-dev/fence/internal/supervise"
	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/coord/etcd"
	"github.com/fence-dev/fence/pkg/coord/local"
)

// The test binary plays three parts: the tests, the watchdog (as the fence
// binary does, dispatched on WatchdogArg), and a minimal `fence run` for
// the tests that must signal fence as a process of its own.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == supervise.WatchdogArg {
		os.Exit(supervise.WatchdogMain(os.Args[1:], nil))
	}
	if cfg := os.Getenv(fenceEnv); cfg != "" {
		os.Exit(fenceMain(cfg))
	}
	os.Exit(m.Run())
}

// fenceEnv carries a fenceConfig, JSON-encoded, to a test binary started as
// fence.
const fenceEnv = "FENCE_SUPERVISE_TEST_FENCE"

type fenceConfig struct {
	StateDir  string
	Endpoints []string
	Opts      supervise.Options // the JSON-able part
}

func fenceMain(cfg string) int {
	var fc fenceConfig
	if err := json.Unmarshal([]byte(cfg), &fc); err != nil {
		fmt.Fprintln(os.Stderr, "fence test helper:", err)
		return 125
	}
	os.Unsetenv(fenceEnv)
	ctx := context.Background()
	var c coord.Coordinator
	var err error
	if len(fc.Endpoints) > 0 {
		c, err = etcd.New(ctx, fc.Endpoints, etcd.WithPrefix("/fence-test/"), etcd.WithDialTimeout(5*time.Second))
	} else {
		c, err = local.Open(fc.StateDir)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "fence:", err)
		return 125
	}
	defer c.Close()
	code, err := supervise.Run(ctx, c, fc.Opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fence:", err)
	}
	return code
}
