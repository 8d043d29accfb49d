package auto

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fence-dev/fence/pkg/coord/postgres"
	"github.com/fence-dev/fence/pkg/guard/sqlguard/pgtest"
)

// TestGuardPostgres: on a PostgreSQL coordinator the guard values are
// in its schema.
func TestGuardPostgres(t *testing.T) {
	srv := pgtest.Start(t)
	c, err := postgres.Open(context.Background(), srv.URL(srv.CreateDatabase(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	g, err := Guard(c)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Put(context.Background(), "k", 1, []byte("v")); err != nil {
		t.Fatal(err)
	}
	pool := c.(interface{ Pool() *pgxpool.Pool }).Pool()
	var v []byte
	if err := pool.QueryRow(context.Background(), "SELECT value FROM fence.guards WHERE key = 'k'").Scan(&v); err != nil || string(v) != "v" {
		t.Fatalf("Guard on postgres (%T): the value in fence.guards = %q, %v; want \"v\"", g, v, err)
	}
}
