package pgstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/coord/postgres"
	"github.com/fence-dev/fence/pkg/guard"
	"github.com/fence-dev/fence/pkg/guard/guardtest"
	"github.com/fence-dev/fence/pkg/guard/pgstore"
	"github.com/fence-dev/fence/pkg/guard/sqlguard/pgtest"
)

func open(t testing.TB, url string) coord.Coordinator {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := postgres.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestConformance(t *testing.T) {
	srv := pgtest.Start(t)
	guardtest.Run(t, func(t *testing.T) guard.Guard {
		s, err := pgstore.New(open(t, srv.URL(srv.CreateDatabase(t))))
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

// TestDown: a database that does not answer is ErrUnavailable,
// not a stale token or a missing key.
func TestDown(t *testing.T) {
	srv := pgtest.Start(t)
	c := open(t, srv.URL(srv.CreateDatabase(t)))
	s, err := pgstore.New(c)
	if err != nil {
		t.Fatal(err)
	}
	pool(c).Close()
	if err := s.Put(context.Background(), "k", 1, nil); !errors.Is(err, coord.ErrUnavailable) {
		t.Errorf("Put on a closed pool = %v, want ErrUnavailable", err)
	}
	if _, err := s.Get(context.Background(), "k"); !errors.Is(err, coord.ErrUnavailable) {
		t.Errorf("Get on a closed pool = %v, want ErrUnavailable", err)
	}
}

// pool is the connection pool of c, a PostgreSQL coordinator.
func pool(c coord.Coordinator) *pgxpool.Pool {
	return c.(interface{ Pool() *pgxpool.Pool }).Pool()
}
