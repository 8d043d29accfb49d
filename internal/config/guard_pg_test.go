package config

import (
	"context"
	"testing"

	"github.com/fence-dev/fence/pkg/coord/postgres"
	"github.com/fence-dev/fence/pkg/guard/pgstore"
	"github.com/fence-dev/fence/pkg/guard/sqlguard/pgtest"
)

// TestOpenGuardPostgres: on a PostgreSQL coordinator the guard values are
// in its schema.
func TestOpenGuardPostgres(t *testing.T) {
	srv := pgtest.Start(t)
	c, err := postgres.Open(context.Background(), postgres.Config{URL: srv.URL(srv.CreateDatabase(t))})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	g, err := OpenGuard(&Config{}, c)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := g.(*pgstore.Store); !ok {
		t.Fatalf("OpenGuard on postgres = %T, want *pgstore.Store", g)
	}
}
