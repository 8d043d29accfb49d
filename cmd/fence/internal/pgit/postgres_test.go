// Package pgit runs fence against a real PostgreSQL server
// (pkg/guard/sqlguard/pgtest): the scripts of cmd/fence/testdata/postgres.
// It is apart from cmd/fence as etcdit is. PostgreSQL missing skips it,
// unless FENCE_REQUIRE_POSTGRES is set (CI): then it fails.
package pgit

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rogpeppe/go-internal/testscript"

	st "github.com/fence-dev/fence/cmd/fence/internal/scripttest"
	"github.com/fence-dev/fence/pkg/guard/sqlguard/pgtest"
)

func TestMain(m *testing.M) {
	testscript.Main(m, st.Commands)
}

// TestPostgresScript runs testdata/postgres/*.txtar against one real
// PostgreSQL server, each script in a schema of its own of one database:
// FENCE_POSTGRES is $PG_URL (TCP to 127.0.0.1, no TLS), FENCE_POSTGRES_SCHEMA
// the script's; $PG_DSN is the same database over the unix socket,
// $PG_PORT the port, $PG_DB the database, $PSQL the psql program
// (PGHOST, PGPORT, PGUSER and PGDATABASE are set for it). The role
// "nocreate" may log in but not create a schema.
func TestPostgresScript(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a PostgreSQL server")
	}
	srv := pgtest.Start(t)
	db := srv.CreateDatabase(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := srv.Open(t, db).ExecContext(ctx, "CREATE ROLE nocreate LOGIN"); err != nil {
		t.Fatal(err)
	}
	psql := filepath.Join(srv.BinDir(), "psql")
	if _, err := os.Stat(psql); err != nil {
		if psql, err = exec.LookPath("psql"); err != nil {
			t.Fatal("no psql beside the server nor on $PATH")
		}
	}
	p := st.Params(filepath.Join("..", "..", "testdata", "postgres"))
	local := p.Setup
	p.Setup = func(env *testscript.Env) error {
		if err := local(env); err != nil {
			return err
		}
		// PostgreSQL, not the local state directory of the local
		// scripts: both in the environment would be refused.
		env.Vars = slices.DeleteFunc(env.Vars, func(kv string) bool { return strings.HasPrefix(kv, "FENCE_STATE_DIR=") })
		env.Setenv("PG_URL", srv.URL(db))
		env.Setenv("PG_DSN", srv.DSN(db))
		env.Setenv("PG_PORT", strconv.Itoa(srv.Port()))
		env.Setenv("PG_DB", db)
		env.Setenv("PSQL", psql)
		for _, kv := range srv.Env(db) {
			k, v, _ := strings.Cut(kv, "=")
			env.Setenv(k, v)
		}
		env.Setenv("FENCE_POSTGRES", srv.URL(db))
		env.Setenv("FENCE_POSTGRES_SCHEMA", "t_"+strings.ReplaceAll(filepath.Base(env.WorkDir), "-", "_"))
		return nil
	}
	testscript.Run(t, p)
}
