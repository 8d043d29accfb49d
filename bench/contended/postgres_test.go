package contended

// The same contended loop on PostgreSQL: fence's Go API on the PostgreSQL
// coordinator (pkg/coord/postgres) against cirello.io/pglock (a lease table
// with a record version number; waiters poll) and against plain session
// advisory locks (pg_advisory_lock through pgx), all on one server, with the
// same guarded write: sqlguard's fenced upsert (pkg/guard/sqlguard, Put)
// into a table of the same database. fence writes with its token, pglock
// with its record version number (a sequence, so it grows from one holder
// to the next), the advisory lock with the constant token 1: it has no
// token, so the same statement fences nothing.
//
// The harness points it at its PostgreSQL server with FENCE_BENCH_POSTGRES
// (a URL of a database); run alone, it starts a throwaway cluster
// (pkg/guard/sqlguard/pgtest; skipped when PostgreSQL is not installed):
//
//	go test ./bench/contended -run '^$' -bench Postgres -benchtime 2s

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"cirello.io/pglock"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/coord/postgres"
	"github.com/fence-dev/fence/pkg/fencing"
	"github.com/fence-dev/fence/pkg/guard"
	"github.com/fence-dev/fence/pkg/guard/sqlguard"
	"github.com/fence-dev/fence/pkg/guard/sqlguard/pgtest"
)

// EnvPostgres is the URL of the database to use; when it is empty the
// benchmarks start a throwaway cluster.
const EnvPostgres = "FENCE_BENCH_POSTGRES"

// EnvIdleWindow is how long BenchmarkPostgresQueries watches an idle
// waiter (a Go duration; 5s when empty).
const EnvIdleWindow = "FENCE_BENCH_IDLE_WINDOW"

// pglock's lease and heartbeat: the settings of its README. A pglock waiter
// that finds the lock taken sleeps one lease duration before it tries
// again, so its lease is also its polling period (at fence's TTL of 15 s,
// a waiter would sleep 15 s).
const (
	pglockLease     = 3 * time.Second
	pglockHeartbeat = time.Second
)

// pgImpl is one loop on PostgreSQL: new makes worker i, its queries seen by
// tr; ns names the loop's own schema, table or lock key.
type pgImpl struct {
	name string
	new  func(ctx context.Context, url, ns string, i int, tr pgx.QueryTracer) (worker, error)
}

var pgImpls = []pgImpl{
	{"fence", newPgFence},
	{"pglock", newPglock},
	{"advisory", newAdvisory},
}

func pgURL(tb testing.TB) string {
	if u := os.Getenv(EnvPostgres); u != "" {
		return u
	}
	srv := pgtest.Start(tb)
	return srv.URL(srv.CreateDatabase(tb))
}

// counter is a pgx.QueryTracer that counts statements sent (BEGIN and
// COMMIT included: each is a round trip).
type counter struct{ n atomic.Int64 }

func (c *counter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	return ctx
}
func (*counter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// openDB opens url through pgx's database/sql driver, its queries seen by tr.
func openDB(url string, tr pgx.QueryTracer) (*sql.DB, error) {
	cc, err := pgx.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	cc.Tracer = tr
	return stdlib.OpenDB(*cc), nil
}

// --- fence: fencing.Acquire on pkg/coord/postgres ------------------------

func newPgFence(ctx context.Context, url, ns string, i int, tr pgx.QueryTracer) (worker, error) {
	c, err := postgres.Open(ctx, url, postgres.WithSchema(ns), postgres.WithTracer(tr))
	if err != nil {
		return nil, err
	}
	return &fenceWorker{c: c, closer: c.Close, holder: fmt.Sprintf("bench-%d", i)}, nil
}

// --- pglock: Client.AcquireContext / guard Put / ReleaseContext -----------

type pglockWorker struct {
	db *sql.DB
	c  *pglock.Client
}

func newPglockClient(url, ns string, tr pgx.QueryTracer, heartbeat time.Duration) (*sql.DB, *pglock.Client, error) {
	db, err := openDB(url, tr)
	if err != nil {
		return nil, nil, err
	}
	c, err := pglock.UnsafeNew(db, pglock.WithCustomTable(ns), pglock.WithLeaseDuration(pglockLease),
		pglock.WithHeartbeatFrequency(heartbeat))
	if err != nil {
		db.Close()
		return nil, nil, err
	}
	return db, c, nil
}

// newPglock is a pglock worker without heartbeats: each hold is milliseconds
// against a lease of 3 s. With the README's heartbeat every second, the
// first heartbeat, sent at once by a goroutine, races with a release that
// follows quickly: when the release cancels a heartbeat whose UPDATE has
// committed, the release deletes nothing (ErrLockAlreadyReleased) and the
// row stays until a waiter takes it over a lease later. Without heartbeats
// pglock also sends two statements fewer per acquisition: this favours it.
func newPglock(ctx context.Context, url, ns string, i int, tr pgx.QueryTracer) (worker, error) {
	db, c, err := newPglockClient(url, ns, tr, 0)
	if err != nil {
		return nil, err
	}
	if i == 0 {
		if err := c.TryCreateTable(); err != nil {
			db.Close()
			return nil, err
		}
	}
	return &pglockWorker{db: db, c: c}, nil
}

func (w *pglockWorker) op(ctx context.Context, inside func(uint64) error) error {
	l, err := w.c.AcquireContext(ctx, "contended")
	if err != nil {
		return fmt.Errorf("pglock acquire: %w", err)
	}
	ierr := inside(uint64(l.RecordVersionNumber()))
	if err := w.c.ReleaseContext(ctx, l); err != nil {
		return err
	}
	if errors.Is(ierr, guard.ErrStale) {
		// pglock's record version number is no fencing token: a lock row
		// released (deleted) and taken again may start below the last
		// holder's. The write is refused; the loop counts it as done.
		return nil
	}
	return ierr
}

func (w *pglockWorker) close() { w.db.Close() }

// --- advisory: pg_advisory_lock / guard Put / pg_advisory_unlock ----------

type advisoryWorker struct {
	conn *pgx.Conn
	key  int64
}

func newAdvisory(ctx context.Context, url, ns string, _ int, tr pgx.QueryTracer) (worker, error) {
	cc, err := pgx.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	cc.Tracer = tr
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return nil, err
	}
	key, _ := strconv.ParseInt(ns[len("bench_"):], 10, 64)
	return &advisoryWorker{conn: conn, key: key}, nil
}

func (w *advisoryWorker) op(ctx context.Context, inside func(uint64) error) error {
	if _, err := w.conn.Exec(ctx, "SELECT pg_advisory_lock($1)", w.key); err != nil {
		return fmt.Errorf("pg_advisory_lock: %w", err)
	}
	ierr := inside(1) // no token: the same fenced statement with a constant fences nothing
	if _, err := w.conn.Exec(ctx, "SELECT pg_advisory_unlock($1)", w.key); err != nil {
		return err
	}
	return ierr
}

func (w *advisoryWorker) close() { w.conn.Close(context.Background()) }

// --- the loop ------------------------------------------------------------

// pgLoop is loop on PostgreSQL: ops acquisitions over n workers of im, each
// with one fenced upsert through sqlguard.
func pgLoop(tb testing.TB, url string, im pgImpl, n, ops int, onStart func()) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	ns := fmt.Sprintf("bench_%d%06d", os.Getpid()%100000, runID.Add(1))
	ws := make([]worker, n)
	for i := range ws {
		w, err := im.new(ctx, url, ns, i, nil)
		if err != nil {
			for _, w := range ws[:i] {
				w.close()
			}
			return 0, fmt.Errorf("%s: %w", im.name, err)
		}
		ws[i] = w
	}
	defer func() {
		for _, w := range ws {
			w.close()
		}
	}()
	db, err := openDB(url, nil)
	if err != nil {
		return 0, err
	}
	defer db.Close()
	g, err := sqlguard.New(db, sqlguard.Postgres, ns+"_guarded")
	if err != nil {
		return 0, err
	}
	if err := g.CreateTable(ctx); err != nil {
		return 0, err
	}
	return runWorkers(ctx, cancel, ws, ops, onStart, func(ctx context.Context, token uint64) error {
		return g.Put(ctx, "contended", token, valueBytes)
	})
}

// BenchmarkContendedPostgres is BenchmarkContended on PostgreSQL (ops/s,
// rounds from FENCE_BENCH_ROUNDS, the order reversed from one round to the
// next).
func BenchmarkContendedPostgres(b *testing.B) {
	url := pgURL(b)
	runRounds(b, pgImpls, func(im pgImpl) string { return im.name }, func(b *testing.B, im pgImpl, n int) (time.Duration, error) {
		return pgLoop(b, url, im, n, b.N, b.ResetTimer)
	})
}

// --- queries -------------------------------------------------------------

// queryCounts is what one side sends, per step.
type queryCounts struct {
	acquire, renew, release float64 // statements per call, uncontended
	waiterPerMin            float64 // an idle waiter's statements per minute while the holder renews
	holderPerMin            float64 // the holder's statements per minute meanwhile
}

// idleTTL is the lease of the idle-waiter measure, for fence and pglock
// alike (pglock's README settings: renewal every second).
const idleTTL = pglockLease

func measureQueries(tb testing.TB, url, impl string, window time.Duration) (queryCounts, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	ns := fmt.Sprintf("bench_%d%06d", os.Getpid()%100000, runID.Add(1))
	const reps = 5
	var q queryCounts
	var holder, waiter counter
	switch impl {
	case "fence":
		c, err := postgres.Open(ctx, url, postgres.WithSchema(ns), postgres.WithTracer(&holder))
		if err != nil {
			return q, err
		}
		defer c.Close()
		opts := coord.AcquireOptions{TTL: 15 * time.Second, Holder: "bench"}
		for range reps {
			n0 := holder.n.Load()
			l, err := c.Acquire(ctx, "q", opts)
			if err != nil {
				return q, err
			}
			n1 := holder.n.Load()
			if _, err := c.Renew(ctx, "q", l.ID); err != nil {
				return q, err
			}
			n2 := holder.n.Load()
			if err := c.Release(ctx, "q", l.ID); err != nil {
				return q, err
			}
			n3 := holder.n.Load()
			q.acquire += float64(n1-n0) / reps
			q.renew += float64(n2-n1) / reps
			q.release += float64(n3-n2) / reps
		}
		w, err := postgres.Open(ctx, url, postgres.WithSchema(ns), postgres.WithTracer(&waiter))
		if err != nil {
			return q, err
		}
		defer w.Close()
		h, err := fencing.Acquire(ctx, c, "idle", coord.AcquireOptions{TTL: idleTTL, Holder: "holder"})
		if err != nil {
			return q, err
		}
		defer h.Release(context.Background())
		q.waiterPerMin, q.holderPerMin, err = idle(ctx, window, &holder, &waiter, func(ctx context.Context) error {
			_, err := w.Acquire(ctx, "idle", coord.AcquireOptions{TTL: idleTTL, Holder: "waiter", Wait: coord.WaitForever})
			return err
		})
		if err := context.Cause(h.Context()); err != nil {
			return q, fmt.Errorf("the holder lost its lease while the waiter waited: %w", err)
		}
		return q, err
	case "pglock":
		// Heartbeats off for the counts per call (SendHeartbeat is the
		// renewal); on for the idle waiter's holder.
		db, c, err := newPglockClient(url, ns, &holder, 0)
		if err != nil {
			return q, err
		}
		defer db.Close()
		if err := c.TryCreateTable(); err != nil {
			return q, err
		}
		for range reps {
			n0 := holder.n.Load()
			l, err := c.AcquireContext(ctx, "q")
			if err != nil {
				return q, err
			}
			n1 := holder.n.Load()
			if err := c.SendHeartbeat(ctx, l); err != nil {
				return q, err
			}
			n2 := holder.n.Load()
			if err := c.ReleaseContext(ctx, l); err != nil {
				return q, err
			}
			n3 := holder.n.Load()
			q.acquire += float64(n1-n0) / reps
			q.renew += float64(n2-n1) / reps
			q.release += float64(n3-n2) / reps
		}
		hdb, hc, err := newPglockClient(url, ns, &holder, pglockHeartbeat)
		if err != nil {
			return q, err
		}
		defer hdb.Close()
		wdb, wc, err := newPglockClient(url, ns, &waiter, pglockHeartbeat)
		if err != nil {
			return q, err
		}
		defer wdb.Close()
		l, err := hc.AcquireContext(ctx, "idle")
		if err != nil {
			return q, err
		}
		defer hc.ReleaseContext(context.Background(), l)
		q.waiterPerMin, q.holderPerMin, err = idle(ctx, window, &holder, &waiter, func(ctx context.Context) error {
			_, err := wc.AcquireContext(ctx, "idle")
			return err
		})
		if l.IsReleased() {
			return q, fmt.Errorf("pglock: the holder lost its lock while the waiter waited")
		}
		return q, err
	case "advisory":
		w, err := newAdvisory(ctx, url, ns, 0, &holder)
		if err != nil {
			return q, err
		}
		a := w.(*advisoryWorker)
		defer a.close()
		for range reps {
			n0 := holder.n.Load()
			if _, err := a.conn.Exec(ctx, "SELECT pg_advisory_lock($1)", a.key); err != nil {
				return q, err
			}
			n1 := holder.n.Load()
			if _, err := a.conn.Exec(ctx, "SELECT pg_advisory_unlock($1)", a.key); err != nil {
				return q, err
			}
			n2 := holder.n.Load()
			q.acquire += float64(n1-n0) / reps
			q.release += float64(n2-n1) / reps
		}
		q.renew = -1 // nothing to renew: the lock lives as long as the session
		ww, err := newAdvisory(ctx, url, ns, 0, &waiter)
		if err != nil {
			return q, err
		}
		defer ww.close()
		if _, err := a.conn.Exec(ctx, "SELECT pg_advisory_lock($1)", a.key); err != nil {
			return q, err
		}
		q.waiterPerMin, q.holderPerMin, err = idle(ctx, window, &holder, &waiter, func(ctx context.Context) error {
			_, err := ww.(*advisoryWorker).conn.Exec(ctx, "SELECT pg_advisory_lock($1)", a.key)
			return err
		})
		return q, err
	}
	return q, fmt.Errorf("no such impl %q", impl)
}

// idle starts wait (a waiter on a lock that is held), lets it settle for a
// second, then counts the statements of the waiter and of the holder over
// window, per minute, and stops the waiter. The waiter must still be
// waiting at the end.
func idle(ctx context.Context, window time.Duration, holder, waiter *counter, wait func(context.Context) error) (float64, float64, error) {
	wctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- wait(wctx) }()
	settle := time.NewTimer(time.Second)
	select {
	case err := <-done:
		stop()
		return 0, 0, fmt.Errorf("the waiter returned before the window: %v", err)
	case <-settle.C:
	}
	w0, h0, t0 := waiter.n.Load(), holder.n.Load(), time.Now()
	time.Sleep(window)
	w1, h1, d := waiter.n.Load(), holder.n.Load(), time.Since(t0)
	stop()
	select {
	case err := <-done:
		if wctx.Err() == nil {
			return 0, 0, fmt.Errorf("the waiter returned during the window: %v", err)
		}
	case <-time.After(10 * time.Second):
		return 0, 0, fmt.Errorf("the waiter did not stop within 10s of its context's end")
	}
	perMin := func(n int64) float64 { return float64(n) / d.Minutes() }
	return perMin(w1 - w0), perMin(h1 - h0), nil
}

// BenchmarkPostgresQueries reports the statements each side sends: per
// acquisition, renewal and release (uncontended, the mean of 5), and per
// minute for an idle waiter and for the holder it waits behind (lease
// idleTTL, renewed every second; the window from FENCE_BENCH_IDLE_WINDOW).
// Counts, not times: run it with -benchtime 1x.
func BenchmarkPostgresQueries(b *testing.B) {
	url := pgURL(b)
	window := 5 * time.Second
	if s := os.Getenv(EnvIdleWindow); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			b.Fatalf("%s=%q: want a Go duration", EnvIdleWindow, s)
		}
		window = d
	}
	for _, im := range pgImpls {
		b.Run("impl="+im.name, func(b *testing.B) {
			q, err := measureQueries(b, url, im.name, window)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(q.acquire, "q/acquire")
			b.ReportMetric(q.renew, "q/renew")
			b.ReportMetric(q.release, "q/release")
			b.ReportMetric(q.waiterPerMin, "waiter-q/min")
			b.ReportMetric(q.holderPerMin, "holder-q/min")
		})
	}
}

// TestPostgresLoops runs every PostgreSQL loop briefly, so that `go test
// ./bench/...` notices a broken benchmark (skipped without PostgreSQL).
func TestPostgresLoops(t *testing.T) {
	url := pgURL(t)
	for _, im := range pgImpls {
		t.Run(im.name, func(t *testing.T) {
			if _, err := pgLoop(t, url, im, 3, 12, nil); err != nil {
				t.Fatal(err)
			}
		})
	}
}
