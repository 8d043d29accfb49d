package sqlguard_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	_ "modernc.org/sqlite" // the pure-Go "sqlite" driver

	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/guard"
	"github.com/fence-dev/fence/pkg/guard/guardtest"
	"github.com/fence-dev/fence/pkg/guard/sqlguard"
	"github.com/fence-dev/fence/pkg/guard/sqlguard/pgtest"
)

var tables atomic.Int64

func tableName() string { return fmt.Sprintf("kv_%d", tables.Add(1)) }

// backend is one database under test.
type backend struct {
	dialect sqlguard.Dialect
	db      *sql.DB
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func (b backend) exec(t *testing.T, q string, args ...any) {
	t.Helper()
	if _, err := b.db.ExecContext(ctxT(t), q, args...); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

// kv creates a fresh key/value table.
func (b backend) kv(t *testing.T, cfg sqlguard.Config) *sqlguard.Table {
	t.Helper()
	cfg.Dialect = b.dialect
	if cfg.Table == "" {
		cfg.Table = tableName()
	}
	tab, err := sqlguard.NewFromConfig(b.db, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := tab.CreateTable(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	return tab
}

func openSQLite(t *testing.T, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(30000)&_pragma=journal_mode(WAL)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func TestPostgres(t *testing.T) {
	srv := pgtest.Start(t)
	b := backend{sqlguard.Postgres, srv.Open(t, srv.CreateDatabase(t))}
	var version string
	if err := b.db.QueryRow("SHOW server_version").Scan(&version); err != nil {
		t.Fatal(err)
	}
	t.Logf("PostgreSQL %s", version)
	t.Run("Conformance", func(t *testing.T) {
		guardtest.Run(t, func(t *testing.T) guard.Guard { return b.kv(t, sqlguard.Config{}) })
	})
	runCommon(t, b)
	t.Run("ConcurrentTransactions", func(t *testing.T) { testConcurrentTx(t, b) })
	t.Run("PsqlRecipe", func(t *testing.T) { testPsqlRecipe(t, srv) })
	t.Run("PsqlTransactionRecipe", func(t *testing.T) { testPsqlTxRecipe(t, srv) })
	t.Run("Schema", func(t *testing.T) {
		b.exec(t, `CREATE SCHEMA "Fenced Schema"`)
		tab := b.kv(t, sqlguard.Config{Schema: "Fenced Schema", Table: "Data"})
		if err := tab.Put(ctxT(t), "k", 1, []byte("v")); err != nil {
			t.Fatal(err)
		}
		var n int
		if err := b.db.QueryRow(`SELECT count(*) FROM "Fenced Schema"."Data"`).Scan(&n); err != nil || n != 1 {
			t.Fatalf("rows in the schema's table: %d, %v", n, err)
		}
	})
}

func TestSQLite(t *testing.T) {
	b := backend{sqlguard.SQLite, openSQLite(t, filepath.Join(t.TempDir(), "guard.db"))}
	var version string
	if err := b.db.QueryRow("SELECT sqlite_version()").Scan(&version); err != nil {
		t.Fatal(err)
	}
	t.Logf("SQLite %s", version)
	t.Run("Conformance", func(t *testing.T) {
		guardtest.Run(t, func(t *testing.T) guard.Guard { return b.kv(t, sqlguard.Config{}) })
	})
	runCommon(t, b)
	t.Run("TwoHandles", func(t *testing.T) {
		// Two handles on one file, as two processes would have.
		path := filepath.Join(t.TempDir(), "shared.db")
		b1 := backend{sqlguard.SQLite, openSQLite(t, path)}
		b2 := backend{sqlguard.SQLite, openSQLite(t, path)}
		t1 := b1.kv(t, sqlguard.Config{Table: "kv"})
		t2, err := sqlguard.NewFromConfig(b2.db, t1.Config())
		if err != nil {
			t.Fatal(err)
		}
		if err := t1.Put(ctxT(t), "k", 5, []byte("five")); err != nil {
			t.Fatal(err)
		}
		var se *guard.StaleError
		if err := t2.Put(ctxT(t), "k", 4, []byte("four")); !errors.As(err, &se) || se.Accepted != 5 {
			t.Fatalf("second handle Put(4) = %v", err)
		}
		if err := t2.Put(ctxT(t), "k", 6, []byte("six")); err != nil {
			t.Fatal(err)
		}
		if v, err := t1.Get(ctxT(t), "k"); err != nil || v.Token != 6 || string(v.Data) != "six" {
			t.Fatalf("first handle Get = %q@%d, %v", v.Data, v.Token, err)
		}
	})
}

func runCommon(t *testing.T, b backend) {
	t.Run("Update", func(t *testing.T) { testUpdate(t, b) })
	t.Run("AddFenceColumn", func(t *testing.T) { testAddFenceColumn(t, b) })
	t.Run("UpdateColumns", func(t *testing.T) { testUpdateColumns(t, b) })
	t.Run("HostileIdentifiers", func(t *testing.T) { testHostileIdentifiers(t, b) })
	t.Run("WrongColumnFails", func(t *testing.T) { testWrongColumn(t, b) })
	t.Run("NoTimestampColumn", func(t *testing.T) { testNoTimestamp(t, b) })
	t.Run("Transaction", func(t *testing.T) { testTransaction(t, b) })
}

func testUpdate(t *testing.T, b backend) {
	ctx := ctxT(t)
	tab := b.kv(t, sqlguard.Config{})
	if err := tab.UpdateValue(ctx, "k", 3, []byte("x")); !errors.Is(err, guard.ErrNotFound) || errors.Is(err, guard.ErrStale) {
		t.Fatalf("Update of a missing row = %v, want ErrNotFound", err)
	}
	if err := tab.Put(ctx, "k", 3, []byte("three")); err != nil {
		t.Fatal(err)
	}
	if err := tab.UpdateValue(ctx, "k", 3, []byte("three again")); err != nil {
		t.Fatalf("Update with the same token: %v", err)
	}
	var se *guard.StaleError
	if err := tab.UpdateValue(ctx, "k", 2, []byte("two")); !errors.As(err, &se) || se.Accepted != 3 || se.Token != 2 || se.Key != "k" {
		t.Fatalf("Update(2) = %v, want stale, accepted 3", err)
	}
	if errors.Is(se, guard.ErrNotFound) {
		t.Fatal("stale also matches ErrNotFound")
	}
	if err := tab.UpdateValue(ctx, "k", 4, []byte("four")); err != nil {
		t.Fatal(err)
	}
	v, err := tab.Get(ctx, "k")
	if err != nil || v.Token != 4 || string(v.Data) != "four" {
		t.Fatalf("Get = %q@%d, %v", v.Data, v.Token, err)
	}
	if err := tab.UpdateValue(ctx, "k", 0, nil); !errors.Is(err, coord.ErrInvalid) {
		t.Errorf("Update(token 0) = %v, want ErrInvalid", err)
	}
	// A token the BIGINT fence cannot hold is refused, not stored negative
	// (which would let any later token through).
	for _, tok := range []uint64{coord.MaxToken + 1, 1<<64 - 1} {
		if err := tab.UpdateValue(ctx, "k", tok, []byte("huge")); !errors.Is(err, coord.ErrInvalid) {
			t.Errorf("Update(token %d) = %v, want ErrInvalid", tok, err)
		}
	}
	if v, err := tab.Get(ctx, "k"); err != nil || v.Token != 4 || string(v.Data) != "four" {
		t.Fatalf("after refused updates: Get = %q@%d, %v", v.Data, v.Token, err)
	}
}

// testAddFenceColumn fences a table that already has rows.
func testAddFenceColumn(t *testing.T, b backend) {
	ctx := ctxT(t)
	name := tableName()
	qt, _ := sqlguard.QuoteIdent(b.dialect, name)
	b.exec(t, "CREATE TABLE "+qt+" (id INTEGER PRIMARY KEY, owner TEXT NOT NULL, balance INTEGER NOT NULL)")
	b.exec(t, "INSERT INTO "+qt+" (id, owner, balance) VALUES (1, 'ann', 10), (2, 'bob', 20)")
	tab, err := sqlguard.NewFromConfig(b.db, sqlguard.Config{Dialect: b.dialect, Table: name, ValueColumn: "owner", UpdatedAtColumn: sqlguard.NoColumn})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 { // idempotent
		if err := tab.AddFenceColumn(ctx); err != nil {
			t.Fatal(err)
		}
	}
	var fence int64
	if err := b.db.QueryRowContext(ctx, "SELECT fence FROM "+qt+" WHERE id = 2").Scan(&fence); err != nil || fence != 0 {
		t.Fatalf("fence of an existing row = %d, %v; want 0", fence, err)
	}
	if err := tab.Update(ctx, 2, 1, map[string]any{"balance": 25}); err != nil {
		t.Fatal(err)
	}
	var se *guard.StaleError
	if err := tab.Update(ctx, 2, 0+1, map[string]any{"balance": 26}); err != nil {
		t.Fatalf("same token again: %v", err)
	}
	if err := tab.Update(ctx, int64(1), 7, map[string]any{"balance": 11}); err != nil {
		t.Fatal(err)
	}
	if err := tab.Update(ctx, 1, 6, map[string]any{"balance": 0}); !errors.As(err, &se) || se.Accepted != 7 || se.Key != "1" {
		t.Fatalf("stale UpdateColumns = %v", err)
	}
	if err := tab.Update(ctx, 3, 9, map[string]any{"balance": 1}); !errors.Is(err, guard.ErrNotFound) {
		t.Fatalf("UpdateColumns of a missing row = %v", err)
	}
	rows := map[int64][2]int64{}
	r, err := b.db.QueryContext(ctx, "SELECT id, balance, fence FROM "+qt)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for r.Next() {
		var id, bal, f int64
		if err := r.Scan(&id, &bal, &f); err != nil {
			t.Fatal(err)
		}
		rows[id] = [2]int64{bal, f}
	}
	if rows[1] != [2]int64{11, 7} || rows[2] != [2]int64{26, 1} || len(rows) != 2 {
		t.Fatalf("rows = %v", rows)
	}
}

func testUpdateColumns(t *testing.T, b backend) {
	ctx := ctxT(t)
	tab := b.kv(t, sqlguard.Config{})
	for _, bad := range []map[string]any{nil, {"fence": 1}, {"ID": "x"}, {"updated_at": time.Now()}, {"": 1}, {"a\x00b": 1}} {
		if err := tab.Update(ctx, "k", 1, bad); !errors.Is(err, coord.ErrInvalid) {
			t.Errorf("UpdateColumns(%v) = %v, want ErrInvalid", bad, err)
		}
	}
	if err := tab.Update(ctx, nil, 1, map[string]any{"value": []byte("x")}); !errors.Is(err, coord.ErrInvalid) {
		t.Errorf("nil key = %v, want ErrInvalid", err)
	}
}

// testHostileIdentifiers uses table and column names that would inject SQL
// if they were interpolated raw, and checks that nothing else is touched.
func testHostileIdentifiers(t *testing.T, b backend) {
	ctx := ctxT(t)
	b.exec(t, "CREATE TABLE victims (id INTEGER PRIMARY KEY)")
	b.exec(t, "INSERT INTO victims (id) VALUES (1)")
	names := []string{
		`x"; DROP TABLE victims; --`,
		"x`; DROP TABLE victims; --",
		`x'); DROP TABLE victims; --`,
		`"`, "`", `Mixed Case "quoted" ` + "`ticks`",
	}
	for i, n := range names {
		tab := b.kv(t, sqlguard.Config{
			Table: n, KeyColumn: n + "k", ValueColumn: n + "v", FenceColumn: n + "f", UpdatedAtColumn: n + "u",
		})
		key := fmt.Sprintf("key'%d\"`", i)
		if err := tab.Put(ctx, key, 2, []byte(n)); err != nil {
			t.Fatalf("Put into %q: %v", n, err)
		}
		var se *guard.StaleError
		if err := tab.Put(ctx, key, 1, nil); !errors.As(err, &se) {
			t.Fatalf("stale Put into %q: %v", n, err)
		}
		if err := tab.UpdateValue(ctx, key, 3, []byte("u")); err != nil {
			t.Fatalf("Update of %q: %v", n, err)
		}
		if err := tab.AddFenceColumn(ctx); err != nil {
			t.Fatalf("AddFenceColumn of %q (exists): %v", n, err)
		}
		v, err := tab.Get(ctx, key)
		if err != nil || v.Token != 3 || string(v.Data) != "u" {
			t.Fatalf("Get from %q = %q@%d, %v", n, v.Data, v.Token, err)
		}
	}
	var n int
	if err := b.db.QueryRowContext(ctx, "SELECT count(*) FROM victims").Scan(&n); err != nil || n != 1 {
		t.Fatalf("victims: %d rows, %v", n, err)
	}
	if _, err := sqlguard.NewFromConfig(b.db, sqlguard.Config{Dialect: b.dialect, Table: "a\x00b"}); !errors.Is(err, coord.ErrInvalid) {
		t.Errorf("NUL in a table name: %v", err)
	}
	if _, err := sqlguard.NewFromConfig(b.db, sqlguard.Config{Dialect: b.dialect, Table: "t", KeyColumn: "x", ValueColumn: "X"}); !errors.Is(err, coord.ErrInvalid) {
		t.Errorf("one column twice: %v", err)
	}
}

// testWrongColumn: a fence column that does not exist is an error, never a
// comparison with a string literal (SQLite's double-quote fallback).
func testWrongColumn(t *testing.T, b backend) {
	ctx := ctxT(t)
	tab := b.kv(t, sqlguard.Config{})
	cfg := tab.Config()
	cfg.FenceColumn = "fenc"
	wrong, err := sqlguard.NewFromConfig(b.db, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := tab.Put(ctx, "k", 5, []byte("five")); err != nil {
		t.Fatal(err)
	}
	if err := wrong.UpdateValue(ctx, "k", 1, []byte("one")); err == nil || errors.Is(err, guard.ErrStale) || errors.Is(err, guard.ErrNotFound) {
		t.Fatalf("Update through a missing fence column = %v, want an SQL error", err)
	}
	if err := wrong.Put(ctx, "k", 1, []byte("one")); err == nil {
		t.Fatal("Put through a missing fence column succeeded")
	}
	if v, err := tab.Get(ctx, "k"); err != nil || v.Token != 5 {
		t.Fatalf("Get = %q@%d, %v", v.Data, v.Token, err)
	}
}

func testNoTimestamp(t *testing.T, b backend) {
	ctx := ctxT(t)
	tab := b.kv(t, sqlguard.Config{UpdatedAtColumn: sqlguard.NoColumn})
	if strings.Contains(tab.Statements().Create, "updated_at") {
		t.Fatalf("Create mentions updated_at: %s", tab.Statements().Create)
	}
	if err := tab.Put(ctx, "k", 1, []byte("v")); err != nil {
		t.Fatal(err)
	}
	if err := tab.UpdateValue(ctx, "k", 2, []byte("w")); err != nil {
		t.Fatal(err)
	}
	v, err := tab.Get(ctx, "k")
	if err != nil || v.Token != 2 || string(v.Data) != "w" || !v.UpdatedAt.IsZero() {
		t.Fatalf("Get = %+v, %v", v, err)
	}
}

// testTransaction runs the guard on a *sql.Tx: a rolled-back fenced write
// leaves nothing behind.
func testTransaction(t *testing.T, b backend) {
	ctx := ctxT(t)
	tab := b.kv(t, sqlguard.Config{})
	if err := tab.Put(ctx, "k", 1, []byte("one")); err != nil {
		t.Fatal(err)
	}
	tx, err := b.db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	ttab, err := sqlguard.NewFromConfig(tx, tab.Config())
	if err != nil {
		t.Fatal(err)
	}
	if err := ttab.Put(ctx, "k", 2, []byte("two")); err != nil {
		t.Fatal(err)
	}
	if v, err := ttab.Get(ctx, "k"); err != nil || v.Token != 2 {
		t.Fatalf("Get inside the transaction = %+v, %v", v, err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if v, err := tab.Get(ctx, "k"); err != nil || v.Token != 1 || string(v.Data) != "one" {
		t.Fatalf("Get after rollback = %q@%d, %v", v.Data, v.Token, err)
	}
}

// testConcurrentTx: PostgreSQL re-checks the fence of a row it waited for.
// Transaction A writes token 5 and holds the row; B's fenced write with
// token 3 waits for A; A commits; B must be refused (it would win if the
// compare were made before the wait). And the other way round: B with a
// larger token is accepted after A commits.
func testConcurrentTx(t *testing.T, b backend) {
	for _, c := range []struct {
		name  string
		bTok  uint64
		stale bool
	}{{"smaller token refused", 3, true}, {"larger token accepted", 9, false}} {
		t.Run(c.name, func(t *testing.T) {
			ctx := ctxT(t)
			tab := b.kv(t, sqlguard.Config{})
			if err := tab.Put(ctx, "k", 1, []byte("one")); err != nil {
				t.Fatal(err)
			}
			txA, err := b.db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer txA.Rollback()
			tA, _ := sqlguard.NewFromConfig(txA, tab.Config())
			if err := tA.UpdateValue(ctx, "k", 5, []byte("A")); err != nil {
				t.Fatal(err)
			}
			// B starts while A holds the row lock.
			var pidA int
			if err := txA.QueryRowContext(ctx, "SELECT pg_backend_pid()").Scan(&pidA); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- tab.UpdateValue(ctx, "k", c.bTok, []byte("B")) }()
			// Wait until B is blocked on A's lock, observed through
			// pg_stat_activity (hang guard: the test context).
			for {
				var waiting int
				err := b.db.QueryRowContext(ctx,
					"SELECT count(*) FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))", pidA).Scan(&waiting)
				if err != nil {
					t.Fatal(err)
				}
				if waiting > 0 {
					break
				}
				select {
				case err := <-done:
					t.Fatalf("B finished while A held the row: %v", err)
				case <-time.After(10 * time.Millisecond):
				}
			}
			if err := txA.Commit(); err != nil {
				t.Fatal(err)
			}
			err = <-done
			v, gerr := tab.Get(ctx, "k")
			if gerr != nil {
				t.Fatal(gerr)
			}
			if c.stale {
				var se *guard.StaleError
				if !errors.As(err, &se) || se.Accepted != 5 {
					t.Fatalf("B = %v, want stale, accepted 5", err)
				}
				if v.Token != 5 || string(v.Data) != "A" {
					t.Fatalf("row = %q@%d, want A@5", v.Data, v.Token)
				}
			} else {
				if err != nil {
					t.Fatalf("B = %v, want accepted", err)
				}
				if v.Token != c.bTok || string(v.Data) != "B" {
					t.Fatalf("row = %q@%d, want B@%d", v.Data, v.Token, c.bTok)
				}
			}
		})
	}
}

func TestStatements(t *testing.T) {
	pg, err := sqlguard.NewFromConfig(&sql.DB{}, sqlguard.Config{Dialect: sqlguard.Postgres, Table: "jobs"})
	if err != nil {
		t.Fatal(err)
	}
	want := sqlguard.Statements{
		Update:         `UPDATE "jobs" SET "value" = $1, "updated_at" = $2, "fence" = $3 WHERE "id" = $4 AND "fence" <= $3`,
		Upsert:         `INSERT INTO "jobs" AS "cur" ("id", "value", "updated_at", "fence") VALUES ($1, $2, $3, $4) ON CONFLICT ("id") DO UPDATE SET "value" = EXCLUDED."value", "updated_at" = EXCLUDED."updated_at", "fence" = EXCLUDED."fence" WHERE "cur"."fence" <= EXCLUDED."fence"`,
		Select:         `SELECT "value", "fence", "updated_at" FROM "jobs" WHERE "id" = $1`,
		Fence:          `SELECT "fence" FROM "jobs" WHERE "id" = $1`,
		AddFenceColumn: `ALTER TABLE "jobs" ADD COLUMN IF NOT EXISTS "fence" BIGINT NOT NULL DEFAULT 0`,
		Create:         `CREATE TABLE IF NOT EXISTS "jobs" ("id" TEXT PRIMARY KEY, "value" BYTEA, "fence" BIGINT NOT NULL DEFAULT 0, "updated_at" TIMESTAMPTZ)`,
	}
	if got := pg.Statements(); got != want {
		t.Errorf("postgres statements:\n got %+v\nwant %+v", got, want)
	}
	lite, err := sqlguard.NewFromConfig(&sql.DB{}, sqlguard.Config{Dialect: sqlguard.SQLite, Table: "jobs", UpdatedAtColumn: sqlguard.NoColumn})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := lite.Statements().Update, "UPDATE `jobs` SET `value` = ?, `fence` = ? WHERE `id` = ? AND `fence` <= ?"; got != want {
		t.Errorf("sqlite update:\n got %s\nwant %s", got, want)
	}
	if got, want := lite.Statements().Upsert, "INSERT INTO `jobs` AS `cur` (`id`, `value`, `fence`) VALUES (?, ?, ?) ON CONFLICT (`id`) DO UPDATE SET `value` = EXCLUDED.`value`, `fence` = EXCLUDED.`fence` WHERE `cur`.`fence` <= EXCLUDED.`fence`"; got != want {
		t.Errorf("sqlite upsert:\n got %s\nwant %s", got, want)
	}
	for _, bad := range []sqlguard.Config{{Table: "t"}, {Dialect: "mysql", Table: "t"}, {Dialect: sqlguard.Postgres}, {Dialect: sqlguard.Postgres, Table: strings.Repeat("t", 64)}} {
		if _, err := sqlguard.NewFromConfig(&sql.DB{}, bad); !errors.Is(err, coord.ErrInvalid) {
			t.Errorf("New(%+v) = %v, want ErrInvalid", bad, err)
		}
	}
	if _, err := sqlguard.NewFromConfig(nil, sqlguard.Config{Dialect: sqlguard.SQLite, Table: "t"}); !errors.Is(err, coord.ErrInvalid) {
		t.Errorf("New(nil DB) = %v", err)
	}
}

// psqlRecipe is the shell recipe of docs/fencing.md.
const psqlRecipe = `written=$(psql -X -qtA -v ON_ERROR_STOP=1 -v token="$FENCE_TOKEN" -v result="$RESULT" <<'SQL'
WITH w AS (
  UPDATE jobs SET result = :'result', fence = :'token'::bigint
  WHERE id = 42 AND fence <= :'token'::bigint
  RETURNING 1)
SELECT count(*) FROM w;
SQL
) || exit 125
[ "$written" = 1 ] || { echo "write refused: token $FENCE_TOKEN is stale" >&2; exit 77; }
`

// testPsqlRecipe runs the documented psql recipe as a shell script would,
// with a value that would inject SQL if it were pasted in.
func testPsqlRecipe(t *testing.T, srv *pgtest.Server) {
	name := srv.CreateDatabase(t)
	db := srv.Open(t, name)
	b := backend{sqlguard.Postgres, db}
	b.exec(t, "CREATE TABLE jobs (id INTEGER PRIMARY KEY, result TEXT)")
	b.exec(t, "INSERT INTO jobs VALUES (42, 'none')")
	tab, err := sqlguard.NewFromConfig(db, sqlguard.Config{Dialect: sqlguard.Postgres, Table: "jobs"})
	if err != nil {
		t.Fatal(err)
	}
	if err := tab.AddFenceColumn(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	run := func(token int, result string) int {
		cmd := exec.Command("/bin/sh", "-c", psqlRecipe)
		cmd.Env = append(os.Environ(), srv.Env(name)...)
		cmd.Env = append(cmd.Env, "PATH="+srv.BinDir()+":"+os.Getenv("PATH"), fmt.Sprint("FENCE_TOKEN=", token), "RESULT="+result)
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode()
		}
		if err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		return 0
	}
	evil := "x'); DROP TABLE jobs; --"
	for _, c := range []struct {
		token, code int
		result      string
	}{{5, 0, evil}, {5, 0, "five"}, {3, 77, "three"}, {8, 0, "eight"}, {7, 77, "seven"}} {
		if got := run(c.token, c.result); got != c.code {
			t.Errorf("token %d: exit %d, want %d", c.token, got, c.code)
		}
	}
	var result string
	var fence int64
	if err := db.QueryRow("SELECT result, fence FROM jobs WHERE id = 42").Scan(&result, &fence); err != nil || result != "eight" || fence != 8 {
		t.Fatalf("row = %q@%d, %v", result, fence, err)
	}
}

// testPsqlTxRecipe runs the transaction recipe of docs/fencing.md (read
// from the file): the token check and the write commit together, a stale
// token writes nothing (exit 77).
func testPsqlTxRecipe(t *testing.T, srv *pgtest.Server) {
	doc, err := os.ReadFile("../../../docs/fencing.md")
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(doc), "<!-- not a recipe: the transaction of a holder")
	_, block, ok2 := strings.Cut(block, "```sh\n")
	block, _, ok3 := strings.Cut(block, "```")
	if !ok || !ok2 || !ok3 {
		t.Fatal("docs/fencing.md has no transaction recipe")
	}
	name := srv.CreateDatabase(t)
	db := srv.Open(t, name)
	b := backend{sqlguard.Postgres, db}
	b.exec(t, "CREATE TABLE job_fence (job INT PRIMARY KEY, fence BIGINT NOT NULL DEFAULT 0)")
	b.exec(t, "CREATE TABLE jobs (id INTEGER PRIMARY KEY, result TEXT)")
	b.exec(t, "INSERT INTO jobs VALUES (42, 'none')")
	for _, c := range []struct {
		token, code int
		result      string
	}{{5, 0, "x'); DROP TABLE jobs; --"}, {5, 0, "five"}, {3, 77, "three"}, {8, 0, "eight"}, {7, 77, "seven"}} {
		cmd := exec.Command("/bin/sh", "-c", block)
		cmd.Env = append(append(os.Environ(), srv.Env(name)...), "PATH="+srv.BinDir()+":"+os.Getenv("PATH"),
			fmt.Sprint("FENCE_TOKEN=", c.token), "RESULT="+c.result)
		out, err := cmd.CombinedOutput()
		if code := cmd.ProcessState.ExitCode(); code != c.code {
			t.Errorf("token %d: exit %d (%v), want %d: %s", c.token, code, err, c.code, out)
		}
	}
	var result string
	var fence int64
	if err := db.QueryRow("SELECT result, fence FROM jobs, job_fence WHERE id = 42 AND job = 42").Scan(&result, &fence); err != nil || result != "eight" || fence != 8 {
		t.Fatalf("row = %q@%d, %v; want eight@8", result, fence, err)
	}
}

// TestOptions: New's options name the schema and columns as the
// configuration does; empty names keep their defaults.
func TestOptions(t *testing.T) {
	for _, c := range []struct {
		opts []sqlguard.Option
		cfg  sqlguard.Config
	}{
		{nil, sqlguard.Config{}},
		{[]sqlguard.Option{sqlguard.WithSchema("s"), sqlguard.WithColumns("k", "", "f")},
			sqlguard.Config{Schema: "s", KeyColumn: "k", FenceColumn: "f"}},
		{[]sqlguard.Option{sqlguard.WithColumns("", "result", ""), sqlguard.WithUpdatedAtColumn("")},
			sqlguard.Config{ValueColumn: "result", UpdatedAtColumn: sqlguard.NoColumn}},
		{[]sqlguard.Option{sqlguard.WithUpdatedAtColumn("at")}, sqlguard.Config{UpdatedAtColumn: "at"}},
	} {
		got, err := sqlguard.New(&sql.DB{}, sqlguard.Postgres, "jobs", c.opts...)
		if err != nil {
			t.Fatal(err)
		}
		c.cfg.Dialect, c.cfg.Table = sqlguard.Postgres, "jobs"
		want, err := sqlguard.NewFromConfig(&sql.DB{}, c.cfg)
		if err != nil {
			t.Fatal(err)
		}
		if got.Statements() != want.Statements() {
			t.Errorf("options %+v: got %+v, want %+v", c.cfg, got.Statements(), want.Statements())
		}
	}
	if _, err := sqlguard.New(&sql.DB{}, sqlguard.Postgres, "t", sqlguard.WithColumns("x", "X", "")); !errors.Is(err, coord.ErrInvalid) {
		t.Errorf("one column twice: %v", err)
	}
}
