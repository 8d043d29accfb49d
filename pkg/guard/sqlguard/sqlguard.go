// Package sqlguard fences writes to SQL tables on database/sql, for
// PostgreSQL and SQLite.
//
// A fenced table has an integer fence column holding the largest token that
// wrote each row. A write names its token and changes the row only when the
// stored fence is not larger, in the same statement:
//
//	UPDATE t SET value = $1, fence = $2 WHERE id = $3 AND fence <= $2
//
// and, for rows that may not exist yet, an insert-or-update whose update
// half carries the same condition:
//
//	INSERT INTO t AS cur (id, value, fence) VALUES ($1, $2, $3)
//	ON CONFLICT (id) DO UPDATE SET value = EXCLUDED.value, fence = EXCLUDED.fence
//	WHERE cur.fence <= EXCLUDED.fence
//
// The database evaluates the condition on the row it is about to change (in
// PostgreSQL under READ COMMITTED, an UPDATE that waited for a concurrent
// writer re-checks its WHERE on the committed row), so the compare and the
// write are one atomic step. When no row changed, sqlguard reads the fence to
// tell a refused write (*guard.StaleError) from a missing row
// (guard.ErrNotFound).
//
// Table implements guard.Guard on a key/value table (Put is the upsert form);
// its Update method fences writes to tables of your own,
// and AddFenceColumn adds the fence column to an existing table. Identifiers
// are quoted (PostgreSQL "…", SQLite `…`), never interpolated raw, and values
// are always bound as parameters.
//
// The package imports no driver: open the *sql.DB with the driver of your
// choice (fence's tests use github.com/jackc/pgx/v5/stdlib and the pure-Go
// modernc.org/sqlite). With SQLite, set a busy timeout (modernc:
// "?_pragma=busy_timeout(10000)") so that concurrent writers wait for each
// other instead of failing with SQLITE_BUSY.
package sqlguard

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/guard"
	"github.com/fence-dev/fence/pkg/guard/internal/check"
)

// Dialect selects placeholders, identifier quoting and column types.
type Dialect string

const (
	// Postgres: $n placeholders, "identifiers", BIGINT/BYTEA/TIMESTAMPTZ.
	Postgres Dialect = "postgres"
	// SQLite: ? placeholders, `identifiers` (never mistaken for string
	// literals), INTEGER/BLOB/TIMESTAMP. Needs SQLite 3.24 or later (upsert).
	SQLite Dialect = "sqlite"
)

// dialects are each dialect's identifier quote and the column types of
// CreateTable and AddFenceColumn.
var dialects = map[Dialect]struct{ quote, key, bytes, integer, time string }{
	Postgres: {`"`, "TEXT PRIMARY KEY", "BYTEA", "BIGINT", "TIMESTAMPTZ"},
	SQLite:   {"`", "TEXT PRIMARY KEY NOT NULL", "BLOB", "INTEGER", "TIMESTAMP"},
}

// DB is what sqlguard runs statements on: *sql.DB, *sql.Tx and *sql.Conn
// satisfy it.
type DB interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// noColumn, as config.UpdatedAtColumn, means the table has no timestamp
// column.
const noColumn = "-"

// config names a fenced table and its columns (see New and the Options).
// Empty column names take the defaults.
type config struct {
	Dialect         Dialect
	Schema          string // optional
	Table           string
	KeyColumn       string // "id"
	ValueColumn     string // "value"
	FenceColumn     string // "fence"
	UpdatedAtColumn string // "updated_at"; noColumn: the table has none
}

// Option sets the schema or a column name of a Table.
type Option func(*config)

// WithSchema qualifies the table (PostgreSQL schema, SQLite attached
// database name).
func WithSchema(schema string) Option { return func(c *config) { c.Schema = schema } }

// WithColumns names the key (primary key or unique) column, the value
// column (of Put and Get) and the fence column (the token of the
// last accepted write). An empty name keeps its default: "id", "value",
// "fence".
func WithColumns(key, value, fence string) Option {
	return func(c *config) { c.KeyColumn, c.ValueColumn, c.FenceColumn = key, value, fence }
}

// WithUpdatedAtColumn names the column that records the writer's time of
// the last accepted write ("updated_at" by default); "" means the table has
// none.
func WithUpdatedAtColumn(name string) Option {
	return func(c *config) {
		c.UpdatedAtColumn = name
		if name == "" {
			c.UpdatedAtColumn = noColumn
		}
	}
}

// Table is a fenced table. It implements guard.Guard (keys are text, values
// are bytes) and is safe for concurrent use when its DB is.
type Table struct {
	db  DB
	cfg config
	// quoted identifiers
	table, key, value, fence, updatedAt string
}

var _ guard.Guard = (*Table)(nil)

// New returns the fenced table called table, in dialect d, reached through
// db. Options name its schema and columns. It checks the names only; it does
// not touch the database.
func New(db DB, d Dialect, table string, opts ...Option) (*Table, error) {
	cfg := config{Dialect: d, Table: table}
	for _, o := range opts {
		o(&cfg)
	}
	return newTable(db, cfg)
}

func newTable(db DB, cfg config) (*Table, error) {
	if db == nil {
		return nil, fmt.Errorf("%w: sqlguard: nil DB", coord.ErrInvalid)
	}
	if _, ok := dialects[cfg.Dialect]; !ok {
		return nil, fmt.Errorf("%w: sqlguard: unknown dialect %q (want %q or %q)", coord.ErrInvalid, cfg.Dialect, Postgres, SQLite)
	}
	t := &Table{db: db, cfg: cfg}
	var err error
	if t.table, err = qualified(cfg.Dialect, cfg.Schema, cfg.Table); err != nil {
		return nil, err
	}
	var used []string
	for _, c := range []struct {
		dst, name *string
		def       string
	}{
		{&t.key, &t.cfg.KeyColumn, "id"}, {&t.value, &t.cfg.ValueColumn, "value"},
		{&t.fence, &t.cfg.FenceColumn, "fence"}, {&t.updatedAt, &t.cfg.UpdatedAtColumn, "updated_at"},
	} {
		name := cmp.Or(*c.name, c.def)
		*c.name = name
		if c.dst == &t.updatedAt && name == noColumn {
			continue
		}
		if *c.dst, err = quoteIdent(cfg.Dialect, name); err != nil {
			return nil, err
		}
		if slices.ContainsFunc(used, func(u string) bool { return strings.EqualFold(u, name) }) {
			return nil, fmt.Errorf("%w: sqlguard: column %q is used twice", coord.ErrInvalid, name)
		}
		used = append(used, name)
	}
	return t, nil
}

// quoteIdent quotes an identifier for dialect d: PostgreSQL "name", SQLite
// `name`, with embedded quote characters doubled. It refuses an empty name,
// invalid UTF-8 and NUL, and, for PostgreSQL, names over 63 bytes (which the
// server would silently truncate). The error wraps coord.ErrInvalid.
func quoteIdent(d Dialect, name string) (string, error) {
	switch {
	case name == "":
		return "", fmt.Errorf("%w: sqlguard: empty identifier", coord.ErrInvalid)
	case !utf8.ValidString(name):
		return "", fmt.Errorf("%w: sqlguard: identifier %q is not valid UTF-8", coord.ErrInvalid, name)
	case strings.ContainsRune(name, 0):
		return "", fmt.Errorf("%w: sqlguard: identifier %q contains NUL", coord.ErrInvalid, name)
	case d == Postgres && len(name) > 63:
		return "", fmt.Errorf("%w: sqlguard: identifier %q is longer than PostgreSQL's 63 bytes", coord.ErrInvalid, name)
	}
	q := dialects[d].quote
	return q + strings.ReplaceAll(name, q, q+q) + q, nil
}

func qualified(d Dialect, schema, table string) (string, error) {
	qt, err := quoteIdent(d, table)
	if err != nil {
		return "", fmt.Errorf("table: %w", err)
	}
	if schema == "" {
		return qt, nil
	}
	qs, err := quoteIdent(d, schema)
	if err != nil {
		return "", fmt.Errorf("schema: %w", err)
	}
	return qs + "." + qt, nil
}

// stmt builds a statement with the dialect's placeholders. A named
// parameter used twice is bound once in PostgreSQL ($n again) and twice in
// SQLite (? and the argument repeated). Parameter names start with a space
// or "col\x00", so they never collide with each other.
type stmt struct {
	d     Dialect
	sb    strings.Builder
	args  []any
	named map[string]int
}

func (s *stmt) sql(parts ...string) *stmt {
	for _, p := range parts {
		s.sb.WriteString(p)
	}
	return s
}

// param writes the placeholder of the parameter called name with value v.
func (s *stmt) param(name string, v any) *stmt {
	if s.d == Postgres {
		if n, ok := s.named[name]; ok {
			s.sb.WriteString("$" + strconv.Itoa(n))
			return s
		}
		if s.named == nil {
			s.named = map[string]int{}
		}
		s.args = append(s.args, v)
		s.named[name] = len(s.args)
		s.sb.WriteString("$" + strconv.Itoa(len(s.args)))
		return s
	}
	s.args = append(s.args, v)
	s.sb.WriteString("?")
	return s
}

func (s *stmt) String() string { return s.sb.String() }

func (t *Table) createStmt() string {
	ty := dialects[t.cfg.Dialect]
	s := fmt.Sprintf("CREATE TABLE IF NOT EXISTS %s (%s %s, %s %s, %s %s NOT NULL DEFAULT 0",
		t.table, t.key, ty.key, t.value, ty.bytes, t.fence, ty.integer)
	if t.updatedAt != "" {
		s += ", " + t.updatedAt + " " + ty.time
	}
	return s + ")"
}

// addFenceStmt adds the fence column (SQLite has no IF NOT EXISTS here:
// AddFenceColumn looks first).
func (t *Table) addFenceStmt() string {
	ifNot := " IF NOT EXISTS"
	if t.cfg.Dialect == SQLite {
		ifNot = ""
	}
	return fmt.Sprintf("ALTER TABLE %s ADD COLUMN%s %s %s NOT NULL DEFAULT 0", t.table, ifNot, t.fence, dialects[t.cfg.Dialect].integer)
}

// updateStmt: UPDATE t SET c1 = $1, …, [updated_at = $n,] fence = $m
// WHERE key = $k AND fence <= $m. set's columns are quoted by the caller's
// check (Update) and sorted here.
func (t *Table) updateStmt(key any, token int64, set map[string]any) *stmt {
	s := &stmt{d: t.cfg.Dialect}
	s.sql("UPDATE ", t.table, " SET ")
	for _, c := range slices.Sorted(maps.Keys(set)) {
		q, _ := quoteIdent(t.cfg.Dialect, c)
		s.sql(q, " = ").param("col\x00"+c, set[c]).sql(", ")
	}
	if t.updatedAt != "" {
		s.sql(t.updatedAt, " = ").param(" now", time.Now().UTC()).sql(", ")
	}
	s.sql(t.fence, " = ").param(" token", token)
	s.sql(" WHERE ", t.key, " = ").param(" key", key)
	s.sql(" AND ", t.fence, " <= ").param(" token", token)
	return s
}

// upsertStmt: INSERT INTO t AS cur (key, value, [updated_at,] fence)
// VALUES (…) ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, …
// WHERE cur.fence <= EXCLUDED.fence.
func (t *Table) upsertStmt(key string, token int64, value []byte) *stmt {
	cur, _ := quoteIdent(t.cfg.Dialect, "cur")
	cols := []string{t.key, t.value}
	if t.updatedAt != "" {
		cols = append(cols, t.updatedAt)
	}
	cols = append(cols, t.fence)
	s := &stmt{d: t.cfg.Dialect}
	s.sql("INSERT INTO ", t.table, " AS ", cur, " (", strings.Join(cols, ", "), ") VALUES (")
	s.param(" key", key).sql(", ").param(" value", value).sql(", ")
	if t.updatedAt != "" {
		s.param(" now", time.Now().UTC()).sql(", ")
	}
	s.param(" token", token).sql(") ON CONFLICT (", t.key, ") DO UPDATE SET ")
	for i, c := range cols[1:] {
		if i > 0 {
			s.sql(", ")
		}
		s.sql(c, " = EXCLUDED.", c)
	}
	s.sql(" WHERE ", cur, ".", t.fence, " <= EXCLUDED.", t.fence)
	return s
}

func (t *Table) selectStmt(key string) *stmt {
	s := &stmt{d: t.cfg.Dialect}
	ts := "NULL"
	if t.updatedAt != "" {
		ts = t.updatedAt
	}
	s.sql("SELECT ", t.value, ", ", t.fence, ", ", ts, " FROM ", t.table, " WHERE ", t.key, " = ").param(" key", key)
	return s
}

func (t *Table) fenceStmt(key any) *stmt {
	s := &stmt{d: t.cfg.Dialect}
	s.sql("SELECT ", t.fence, " FROM ", t.table, " WHERE ", t.key, " = ").param(" key", key)
	return s
}

// CreateTable creates the key/value table if it does not exist: key TEXT
// PRIMARY KEY, value BYTEA/BLOB, fence BIGINT NOT NULL DEFAULT 0, and the
// timestamp column TIMESTAMPTZ/TIMESTAMP.
func (t *Table) CreateTable(ctx context.Context) error {
	if _, err := t.db.ExecContext(ctx, t.createStmt()); err != nil {
		return fmt.Errorf("sqlguard: create table %s: %w", t.table, err)
	}
	return nil
}

// AddFenceColumn adds the fence column (BIGINT/INTEGER NOT NULL DEFAULT 0)
// to an existing table; it does nothing when the column exists. Existing
// rows get fence 0, below every token, so the first fenced write to each row
// is accepted.
func (t *Table) AddFenceColumn(ctx context.Context) error {
	if t.cfg.Dialect == SQLite {
		exists, err := t.sqliteHasColumn(ctx, t.cfg.FenceColumn)
		if err != nil || exists {
			return err
		}
	}
	_, err := t.db.ExecContext(ctx, t.addFenceStmt())
	if err != nil && t.cfg.Dialect == SQLite {
		// A concurrent AddFenceColumn may have added it first.
		if exists, err2 := t.sqliteHasColumn(ctx, t.cfg.FenceColumn); err2 == nil && exists {
			return nil
		}
	}
	if err != nil {
		return fmt.Errorf("sqlguard: add fence column to %s: %w", t.table, err)
	}
	return nil
}

func (t *Table) sqliteHasColumn(ctx context.Context, column string) (bool, error) {
	q := "SELECT COUNT(*) FROM pragma_table_info(?) WHERE name = ? COLLATE NOCASE"
	args := []any{t.cfg.Table, column}
	if t.cfg.Schema != "" {
		q = "SELECT COUNT(*) FROM pragma_table_info(?, ?) WHERE name = ? COLLATE NOCASE"
		args = []any{t.cfg.Table, t.cfg.Schema, column}
	}
	var n int
	if err := t.db.QueryRowContext(ctx, q, args...).Scan(&n); err != nil {
		return false, fmt.Errorf("sqlguard: inspect table %s: %w", t.table, err)
	}
	return n > 0, nil
}

// attempts bounds the retries of a write whose row changed between the
// write and the read that explains why it changed nothing (a row deleted and
// inserted again in between).
const attempts = 3

// Put implements guard.Guard with the fenced upsert: it inserts the row for
// key or updates it when the stored fence is at most token.
func (t *Table) Put(ctx context.Context, key string, token uint64, value []byte) error {
	if err := check.Put(key, token); err != nil {
		return err
	}
	if value == nil {
		value = []byte{}
	}
	return t.write(ctx, "put", key, key, token, true, func() *stmt { return t.upsertStmt(key, int64(token), value) })
}

// write runs the fenced statement build makes until it changes a row, or
// explain says why it changed none; a row that changed under it (and, with
// retryMissing, for the upsert, a row deleted meanwhile) is tried again, up
// to attempts times. what and name are for the errors.
func (t *Table) write(ctx context.Context, what string, key any, name string, token uint64, retryMissing bool, build func() *stmt) error {
	for range attempts {
		s := build()
		res, err := t.db.ExecContext(ctx, s.String(), s.args...)
		if err != nil {
			return fmt.Errorf("sqlguard: %s %q: %w", what, name, err)
		}
		if n, err := res.RowsAffected(); err != nil {
			return fmt.Errorf("sqlguard: %s %q: %w", what, name, err)
		} else if n > 0 {
			return nil
		}
		err = t.explain(ctx, key, name, token)
		if !errors.Is(err, errRetry) && !(retryMissing && errors.Is(err, guard.ErrNotFound)) {
			return err
		}
	}
	return fmt.Errorf("sqlguard: %s %q: the row kept changing under the write; giving up", what, name)
}

// Update is the fenced UPDATE: it sets each column of set to its value,
// the timestamp column (unless the table has none) and the fence to token,
// in the row whose key column equals key, when the row's fence is at most
// token. It returns *guard.StaleError when the row's fence is larger than
// token and an error wrapping guard.ErrNotFound when there is no such row.
// key may be of any type the driver accepts (an integer id, a string). set
// must not name the key or fence column.
func (t *Table) Update(ctx context.Context, key any, token uint64, set map[string]any) error {
	if err := check.Token(token); err != nil {
		return err
	}
	if key == nil {
		return fmt.Errorf("%w: sqlguard: nil key", coord.ErrInvalid)
	}
	if len(set) == 0 {
		return fmt.Errorf("%w: sqlguard: no column to update", coord.ErrInvalid)
	}
	for c := range set {
		if _, err := quoteIdent(t.cfg.Dialect, c); err != nil {
			return err
		}
		for _, reserved := range []string{t.cfg.KeyColumn, t.cfg.FenceColumn, t.cfg.UpdatedAtColumn} {
			if strings.EqualFold(c, reserved) {
				return fmt.Errorf("%w: sqlguard: column %q is set by the fenced update itself", coord.ErrInvalid, c)
			}
		}
	}
	return t.write(ctx, "update", key, fmt.Sprint(key), token, false, func() *stmt { return t.updateStmt(key, int64(token), set) })
}

var errRetry = errors.New("retry")

// explain says why a fenced write changed no row: the row is missing
// (guard.ErrNotFound), its fence is larger (*guard.StaleError), or it
// changed since (errRetry).
func (t *Table) explain(ctx context.Context, key any, name string, token uint64) error {
	s := t.fenceStmt(key)
	var fence sql.NullInt64
	err := t.db.QueryRowContext(ctx, s.String(), s.args...).Scan(&fence)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return fmt.Errorf("%w: %q (no row in %s)", guard.ErrNotFound, name, t.table)
	case err != nil:
		return fmt.Errorf("sqlguard: read fence of %q: %w", name, err)
	case !fence.Valid:
		return fmt.Errorf("sqlguard: the fence of %q in %s is NULL; make the column NOT NULL DEFAULT 0", name, t.table)
	case fence.Int64 < 0 || uint64(fence.Int64) <= token:
		return errRetry
	}
	return &guard.StaleError{Key: name, Token: token, Accepted: uint64(fence.Int64)}
}

// Get implements guard.Guard: the row's value, fence and timestamp.
func (t *Table) Get(ctx context.Context, key string) (guard.Value, error) {
	if err := guard.ValidateKey(key); err != nil {
		return guard.Value{}, err
	}
	s := t.selectStmt(key)
	var (
		data  []byte
		fence sql.NullInt64
		ts    sql.NullTime
	)
	err := t.db.QueryRowContext(ctx, s.String(), s.args...).Scan(&data, &fence, &ts)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return guard.Value{}, fmt.Errorf("%w: %q", guard.ErrNotFound, key)
	case err != nil:
		return guard.Value{}, fmt.Errorf("sqlguard: get %q: %w", key, err)
	case !fence.Valid || fence.Int64 < 0:
		return guard.Value{}, fmt.Errorf("sqlguard: get %q: bad fence %v in %s", key, fence, t.table)
	}
	if fence.Int64 == 0 {
		// A row no fenced write has touched yet (fence column just added).
		return guard.Value{}, fmt.Errorf("%w: %q (row never written with a token)", guard.ErrNotFound, key)
	}
	if data == nil {
		data = []byte{}
	}
	return guard.Value{Data: data, Token: uint64(fence.Int64), UpdatedAt: ts.Time}, nil
}
