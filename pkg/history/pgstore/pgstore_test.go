package pgstore_test

import (
	"context"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/coord/postgres"
	"github.com/fence-dev/fence/pkg/guard/sqlguard/pgtest"
	"github.com/fence-dev/fence/pkg/history"
	"github.com/fence-dev/fence/pkg/history/historytest"
	"github.com/fence-dev/fence/pkg/history/pgstore"
)

const envURL = "FENCE_PGSTORE_URL"

func TestMain(m *testing.M) {
	if url := os.Getenv(envURL); url != "" { // a writer process of ConcurrentProcesses
		c, err := open(url)
		if err != nil {
			os.Exit(1)
		}
		s, _ := pgstore.New(c)
		code := historytest.WriterMain(s)
		c.Close()
		os.Exit(code)
	}
	os.Exit(m.Run())
}

func open(url string) (coord.Coordinator, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return postgres.Open(ctx, url)
}

func TestConformance(t *testing.T) {
	srv := pgtest.Start(t)
	urls := map[*testing.T]string{}
	historytest.Run(t, historytest.Harness{
		Storage: func(t *testing.T) historytest.Opener {
			url := srv.URL(srv.CreateDatabase(t))
			urls[t] = url
			return func(opts ...history.Option) history.Store {
				c, err := open(url)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { c.Close() })
				s, err := pgstore.New(c, opts...)
				if err != nil {
					t.Fatal(err)
				}
				return s
			}
		},
		Stored: func(t *testing.T, _ historytest.Opener, lock string) int {
			var n int
			c, err := open(urls[t])
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if err := pool(c).QueryRow(context.Background(), "SELECT count(*) FROM fence.history WHERE lock = $1", lock).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n
		},
		Slack: func(int) int { return 0 },
		Spawn: func(t *testing.T, _ historytest.Opener, lock, id string, n int) *exec.Cmd {
			cmd := exec.Command(os.Args[0], "-test.run", "^$")
			cmd.Env = append(append(os.Environ(), envURL+"="+urls[t]), historytest.WriterEnv(lock, id, n)...)
			return cmd
		},
	})
}

// pool is the connection pool of c, a PostgreSQL coordinator.
func pool(c coord.Coordinator) *pgxpool.Pool {
	return c.(interface{ Pool() *pgxpool.Pool }).Pool()
}
