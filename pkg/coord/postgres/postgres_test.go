package postgres_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/coord/coordtest"
	"github.com/fence-dev/fence/pkg/coord/postgres"
	"github.com/fence-dev/fence/pkg/guard/sqlguard/pgtest"
)

const envURL = "FENCE_CONFORMANCE_POSTGRES"

func TestMain(m *testing.M) {
	if coordtest.IsHelper() {
		os.Exit(coordtest.HelperMain(func() (coord.Coordinator, error) {
			return open(os.Getenv(envURL))
		}))
	}
	os.Exit(m.Run())
}

func open(url string) (*postgres.Coordinator, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return postgres.Open(ctx, postgres.Config{URL: url})
}

var (
	_ coord.Coordinator     = (*postgres.Coordinator)(nil)
	_ coord.ProcessAttacher = (*postgres.Coordinator)(nil)
	_ coord.LeaseWatcher    = (*postgres.Coordinator)(nil)
	_ coord.Peeker          = (*postgres.Coordinator)(nil)
	_ coord.AsyncRenewer    = (*postgres.Coordinator)(nil)
	_ coord.StopRequester   = (*postgres.Coordinator)(nil)
	_ coord.Completer       = (*postgres.Coordinator)(nil)
	_ coord.Limiter         = (*postgres.Coordinator)(nil)
)

// TestConformance runs the coordtest suite against a real PostgreSQL.
func TestConformance(t *testing.T) {
	srv := pgtest.Start(t)
	db := srv.CreateDatabase(t)
	url := srv.URL(db)
	coordtest.Run(t, coordtest.Harness{
		New: func(t testing.TB) coord.Coordinator {
			c, err := open(url)
			if err != nil {
				t.Fatalf("postgres.Open: %v", err)
			}
			return c
		},
		Restart:  srv.Restart,
		ShortTTL: 500 * time.Millisecond,
		Spawn: func(t testing.TB, args ...string) *exec.Cmd {
			cmd := coordtest.HelperCommand(args...)
			cmd.Env = append(cmd.Env, fmt.Sprintf("%s=%s", envURL, url))
			return cmd
		},
	})
}
