package coord_test

import (
	"context"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/fence-dev/fence/internal/etcdtest"
	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/coord/coordtest"
	"github.com/fence-dev/fence/pkg/coord/etcd"
	"github.com/fence-dev/fence/pkg/coord/local"
)

// How a helper process (coordtest.HelperCommand) finds the coordinator.
const (
	envBackend   = "FENCE_CONFORMANCE_BACKEND" // local or etcd
	envDir       = "FENCE_CONFORMANCE_DIR"     // local state directory
	envEndpoints = "FENCE_CONFORMANCE_ENDPOINTS"
	envPrefix    = "FENCE_CONFORMANCE_PREFIX"
)

const etcdPrefix = "/fence-conformance/"

func TestMain(m *testing.M) {
	if coordtest.IsHelper() {
		os.Exit(coordtest.HelperMain(openHelper))
	}
	goleak.VerifyTestMain(m)
}

// openHelper opens the coordinator a helper process was started for.
func openHelper() (coord.Coordinator, error) {
	switch b := os.Getenv(envBackend); b {
	case "local":
		return openLocal(os.Getenv(envDir))
	case "etcd":
		return openEtcd(strings.Split(os.Getenv(envEndpoints), ","), os.Getenv(envPrefix))
	default:
		return nil, &os.PathError{Op: "open", Path: envBackend + "=" + b, Err: fs.ErrInvalid}
	}
}

func openLocal(dir string) (coord.Coordinator, error) {
	c, err := local.Open(dir)
	if err != nil {
		return nil, err
	}
	return c, nil
}

func openEtcd(endpoints []string, prefix string) (coord.Coordinator, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := etcd.New(ctx, endpoints, etcd.WithPrefix(prefix), etcd.WithDialTimeout(5*time.Second))
	if err != nil {
		return nil, err
	}
	return c, nil
}

// TestConformance runs the coordtest suite against both backends:
// go test ./pkg/... -run Conformance -v
func TestConformance(t *testing.T) {
	t.Run("local", func(t *testing.T) {
		t.Parallel()
		dir := filepath.Join(t.TempDir(), "state")
		coordtest.Run(t, coordtest.Harness{
			New: func(t testing.TB) coord.Coordinator {
				c, err := openLocal(dir)
				if err != nil {
					t.Fatalf("local.Open(%s): %v", dir, err)
				}
				return c
			},
			// Every client is a fresh open of the state directory: closing
			// them all and opening new ones is the restart.
			Restart:  nil,
			ShortTTL: 500 * time.Millisecond,
			Spawn: func(t testing.TB, args ...string) *exec.Cmd {
				cmd := coordtest.HelperCommand(args...)
				cmd.Env = append(cmd.Env, envBackend+"=local", envDir+"="+dir)
				return cmd
			},
			ProcessLeases: true,
			StateFile: func(t testing.TB, name string) string {
				c, err := local.Open(dir)
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				return c.(interface{ StateFile(string) string }).StateFile(name)
			},
		})
	})
	t.Run("etcd", func(t *testing.T) {
		t.Parallel()
		srv := etcdtest.Start(t)
		coordtest.Run(t, coordtest.Harness{
			New: func(t testing.TB) coord.Coordinator {
				c, err := openEtcd(srv.Endpoints(), etcdPrefix)
				if err != nil {
					t.Fatalf("etcd.New(%v): %v", srv.Endpoints(), err)
				}
				return c
			},
			Restart: srv.Restart,
			// The embedded server ticks every 10ms: its minimum lease TTL is
			// 1s (3/2 election timeouts, rounded up to whole seconds).
			ShortTTL: time.Second,
			Spawn: func(t testing.TB, args ...string) *exec.Cmd {
				cmd := coordtest.HelperCommand(args...)
				cmd.Env = append(cmd.Env, envBackend+"=etcd",
					envEndpoints+"="+strings.Join(srv.Endpoints(), ","), envPrefix+"="+etcdPrefix)
				return cmd
			},
		})
	})
}
