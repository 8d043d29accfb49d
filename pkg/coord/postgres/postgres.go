// Package postgres is fence's PostgreSQL coordinator: leases, fencing
// tokens, a first-come-first-served queue, semaphores, operator limits and
// once-records in tables of one schema (default "fence"), over pgx.
//
// # Tokens
//
// Each lock has a row in locks whose last_token is raised by one, with a
// check against coord.MaxToken, in the transaction that grants a lease. Rows
// of locks are never deleted, so tokens only go up, across restarts and
// crash recovery: fence's sessions commit with synchronous_commit at least
// local (durable), raised from off (see durable).
//
// # Leases without trusting clocks (the invariant)
//
// No decision depends on the database's clock or on clocks agreeing. A lease
// row carries a record version (rvn), a random number replaced by every
// renewal. A client takes a lease over (deletes it, conditionally on the rvn
// it saw) only once it has seen the same rvn for TTL+TTL/100 on its own
// monotonic clock, counted from when its read (or the renewal's
// notification) came back, the design of the DynamoDB lock client.
//
// Why fence's stop comes first: let S be the send time of the holder's last
// acknowledged renewal (or grant) and W the commit of the rvn it wrote, so
// S <= W. A contender can only have first seen that rvn at some O >= W, and
// deletes the row no earlier than O+TTL >= S+TTL. The holder counts its
// lease safe until S+TTL-margin on its own monotonic clock (coord.Lease.
// SafeUntil) and its supervisor stops the command by then. A later renewal
// changes the rvn, so the contender's conditional delete fails and it starts
// counting again. Only clock rates matter (bounded drift, covered by the
// margins), never clock readings.
//
// # Waiting
//
// A waiter takes a sequence number, holds a session advisory lock named by
// it (so that others can tell a dead waiter, whose session is gone, and drop
// it), inserts itself in the waiters table and LISTENs on the lock's
// channel. Grants, releases, queue changes and limits NOTIFY in their
// transactions; renewals NOTIFY the new rvn, so a waiter follows the holder's
// renewals without sending a query. It queries only when notified of a
// change, when a lease it watches has gone a whole TTL unrenewed, or, while
// the lock is free but a waiter ahead has not taken it, after a short pause.
// A waiter with others ahead of it ignores a release (the head takes it)
// and counts the grants and leavings ahead from their notifications, so a
// handoff wakes the head and the next waiter, not the whole queue. A
// waiter's connection, once granted, is kept for the client's next wait.
// An idle lock is granted in one statement (grant_idle in the schema).
//
// LISTEN needs a session: a connection pooler in transaction mode (PgBouncer's
// pool_mode=transaction) drops notifications and advisory locks. Point fence
// at PostgreSQL directly, or at a pooler in session mode.
package postgres

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fence-dev/fence/pkg/coord"
)

// defaultSchema is the schema of fence's tables when none is named.
const defaultSchema = "fence"

// Option configures Open: the schema's name, the connections.
type Option func(schema *string, cc *pgx.ConnConfig)

// WithSchema names the schema of fence's tables ("fence" when not
// given, or empty).
func WithSchema(name string) Option { return func(s *string, _ *pgx.ConnConfig) { *s = name } }

// WithTracer has t see every query (tests and the benchmark count them).
func WithTracer(t pgx.QueryTracer) Option {
	return func(_ *string, cc *pgx.ConnConfig) { cc.Tracer = t }
}

// coordinator is a coord.Coordinator on PostgreSQL. It also offers SQL,
// Schema, Pool, Tx and MapErr to the stores (see below Close) and
// ReplicationWarning to the CLI.
type coordinator struct {
	pool    *pgxpool.Pool
	connCfg *pgx.ConnConfig // for the connections that LISTEN
	schema  string          // quoted identifier
	name    string          // the schema's name
	class   int32           // advisory lock class of this schema's waiters
	chWatch string          // every change of a lock: payload watchPayload
	chLimit string          // every change of a limit
	where   string

	mu      sync.Mutex
	seen    map[int64]obs // lease id -> the rvn this client saw, since when
	spare   *pgx.Conn     // a waiter's connection kept for the next (listen)
	spareAt time.Time

	closed    context.Context // ended by Close
	end       context.CancelFunc
	closeOnce sync.Once
	wg        sync.WaitGroup
}

// obs is what this client saw of a lease: its rvn, first seen at at.
type obs struct {
	name string
	rvn  int64
	at   time.Time
}

// Open connects to the database at url (a libpq URL or DSN), refuses a
// standby and creates the schema when it is missing (see SchemaSQL).
func Open(ctx context.Context, url string, opts ...Option) (coord.Coordinator, error) {
	pc, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("%w: postgres URL: %v", coord.ErrInvalid, oneLine(err))
	}
	schema := ""
	for _, o := range opts {
		o(&schema, pc.ConnConfig)
	}
	if schema == "" {
		schema = defaultSchema
	}
	if err := checkIdent(schema); err != nil {
		return nil, err
	}
	pc.MaxConns = 4
	pc.MaxConnIdleTime = time.Minute
	pc.ConnConfig.AfterConnect = durable
	h := sha256.Sum256([]byte(schema))
	c := &coordinator{
		connCfg: pc.ConnConfig.Copy(),
		schema:  pgx.Identifier{schema}.Sanitize(),
		name:    schema,
		class:   int32(binary.BigEndian.Uint32(h[:4]) & 0x7fffffff),
		chWatch: "fence_w_" + hex.EncodeToString(h[:8]),
		chLimit: "fence_l_" + hex.EncodeToString(h[:8]),
		where:   fmt.Sprintf("postgres %s/%s schema %s", net.JoinHostPort(pc.ConnConfig.Host, fmt.Sprint(pc.ConnConfig.Port)), pc.ConnConfig.Database, schema),
		seen:    map[int64]obs{},
	}
	c.closed, c.end = context.WithCancel(context.Background())
	if c.pool, err = pgxpool.NewWithConfig(ctx, pc); err != nil {
		return nil, fmt.Errorf("%w: %v", coord.ErrUnavailable, oneLine(err))
	}
	if err := c.prepare(ctx); err != nil {
		c.pool.Close()
		return nil, err
	}
	return c, nil
}

// durable raises a session's synchronous_commit of off to local: a grant
// (its token) and a renewal (its rvn) must survive a crash of the server,
// which may lose asynchronous commits. The other settings flush locally.
func durable(ctx context.Context, pc *pgconn.PgConn) error {
	_, err := pc.Exec(ctx, "SELECT set_config('synchronous_commit', 'local', false) WHERE current_setting('synchronous_commit') = 'off'").ReadAll()
	return err
}

// checkIdent refuses a schema name PostgreSQL would truncate or that is
// not printable.
func checkIdent(s string) error {
	if len(s) > 63 || strings.ContainsAny(s, "\x00\"") || coord.ValidateName(s) != nil {
		return fmt.Errorf("%w: postgres schema %q: want 1 to 63 printable bytes without quotes", coord.ErrInvalid, s)
	}
	return nil
}

// Describe says where the coordinator is.
func (c *coordinator) Describe() string { return c.where }

// Close closes the connections (not the leases).
func (c *coordinator) Close() error {
	c.closeOnce.Do(func() {
		c.end()
		c.wg.Wait()
		c.mu.Lock()
		if c.spare != nil {
			c.spare.Close(context.Background())
			c.spare = nil
		}
		c.mu.Unlock()
		c.pool.Close()
	})
	return nil
}

func (c *coordinator) check() error {
	if c.closed.Err() != nil {
		return fmt.Errorf("%w: coordinator closed", coord.ErrUnavailable)
	}
	return nil
}

// The stores that keep fence's history and guard values in the same schema
// (pkg/history/pgstore, pkg/guard/pgstore) share the coordinator's pool and
// its error classes through these.

// SQL is q with {s} replaced by the schema (quoted).
func (c *coordinator) SQL(q string) string { return strings.ReplaceAll(q, "{s}", c.schema) }

// Schema is the name of the schema (unquoted).
func (c *coordinator) Schema() string { return c.name }

// Pool is the coordinator's connection pool.
func (c *coordinator) Pool() *pgxpool.Pool { return c.pool }

// Tx runs f in a transaction on the pool; an error of the database is
// coord.ErrUnavailable, named by op.
func (c *coordinator) Tx(ctx context.Context, op string, f func(pgx.Tx) error) error {
	return c.tx(ctx, c.pool, op, f)
}

// chLock is the channel of one lock.
func (c *coordinator) chLock(name string) string {
	h := sha256.Sum256([]byte(c.schema + "\x00" + name))
	return "fence_" + hex.EncodeToString(h[:16])
}

// MapErr turns a database error into coord's classes (as Tx returns it),
// named by op; once the coordinator is closed, check's error.
func (c *coordinator) MapErr(ctx context.Context, op string, err error) error {
	if err == nil {
		return nil
	}
	if ctx.Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || pgconn.Timeout(err)) {
		return fmt.Errorf("%s: %w", op, ctx.Err())
	}
	if errors.Is(err, coord.ErrInvalid) || errors.Is(err, coord.ErrBusy) || errors.Is(err, coord.ErrLeaseLost) ||
		errors.Is(err, coord.ErrNotHeld) || errors.Is(err, coord.ErrUnavailable) || errors.Is(err, coord.ErrOtherToken) {
		return err
	}
	if err := c.check(); err != nil { // the pool is closed: no need to check before using it
		return err
	}
	return fmt.Errorf("%s: %w: %s", op, coord.ErrUnavailable, oneLine(err))
}

func oneLine(err error) string { return strings.ReplaceAll(err.Error(), "\n", " ") }

// tx runs f in a transaction on q (the pool or a connection).
func (c *coordinator) tx(ctx context.Context, q beginner, op string, f func(pgx.Tx) error) error {
	if err := c.check(); err != nil {
		return err
	}
	return c.MapErr(ctx, op, pgx.BeginFunc(ctx, q, f))
}

type beginner interface {
	Begin(context.Context) (pgx.Tx, error)
}

// Lease ids are 16 hex digits of a positive int64.
func formatID(id int64) string { return fmt.Sprintf("%016x", id) }

func parseID(s string) (int64, error) {
	id, err := strconv.ParseUint(s, 16, 64)
	if len(s) != 16 || strings.ToLower(s) != s || err != nil {
		return 0, fmt.Errorf("%w: lease id %q is not one of this coordinator's (16 hex digits)", coord.ErrInvalid, s)
	}
	if id == 0 || id > coord.MaxToken {
		return 0, fmt.Errorf("%w: lease id %q is out of range", coord.ErrInvalid, s)
	}
	return int64(id), nil
}

// random is a positive random int64.
func random() int64 {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return int64(binary.BigEndian.Uint64(b[:])&(1<<63-1)) | 1
}

// unrenewed is how long a contender must see a lease's rvn unchanged before
// it takes the lease over: its TTL and a margin for clock rates. (A
// variable only for the planted-bug test.)
var unrenewed = func(ttl time.Duration) time.Duration { return ttl + ttl/100 + time.Millisecond }

// observe records rvn of lease id as seen at now, and reports whether it has
// been seen unchanged for its whole TTL and the margin: then the lease may
// be taken over.
func (c *coordinator) observe(name string, id, rvn int64, ttl time.Duration, now time.Time) (expired bool, at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	o, ok := c.seen[id]
	if !ok || o.rvn != rvn {
		o = obs{name: name, rvn: rvn, at: now}
		c.seen[id] = o
	}
	end := o.at.Add(unrenewed(ttl))
	return !now.Before(end), end
}

// forget drops what this client saw of the leases of name not in keep.
func (c *coordinator) forget(name string, keep map[int64]bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for id, o := range c.seen {
		if o.name == name && !keep[id] {
			delete(c.seen, id)
		}
	}
}

// notify announces a change of lock name other than a grant (grant and
// grant_idle announce theirs). note is the payload on the lock's channel,
// for its waiters: "j" a waiter joined the queue, "g SEQ" waiter SEQ was
// granted, "l SEQ" it left, "f" a lease ended, "r ID RVN" a renewal (Renew),
// "c" any other change. With stmt, a data-modifying statement of args,
// notify runs it and announces, in the same statement, only when it changed
// a row; changed says whether it did.
func (c *coordinator) notify(ctx context.Context, q querier, name, note, stmt string, args ...any) (changed bool, err error) {
	n := len(args)
	sql := fmt.Sprintf("SELECT pg_notify($%d, $%d), pg_notify($%d, $%d)", n+1, n+2, n+3, n+4)
	if stmt != "" {
		sql = fmt.Sprintf("WITH d AS (%s RETURNING 1) %s FROM (SELECT FROM d LIMIT 1) x", stmt, sql)
	}
	tag, err := q.Exec(ctx, c.SQL(sql), append(args, c.chLock(name), note, c.chWatch, watchPayload(name, 0, ""))...)
	return tag.RowsAffected() > 0, err
}

// watchPayload is the payload of a change of lock name on chWatch (names
// and holders hold no control characters).
func watchPayload(name string, token int64, holder string) string {
	return fmt.Sprintf("%d\n%s\n%s", token, holder, name)
}

// parsePayload reads a watchPayload.
func parsePayload(p string) (name string, token uint64, holder string) {
	f := strings.SplitN(p, "\n", 3)
	if len(f) != 3 {
		return "", 0, ""
	}
	token, _ = strconv.ParseUint(f[0], 10, 64)
	return f[2], token, f[1]
}
