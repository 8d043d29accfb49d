package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/internal/coordkit"
)

// lease is a holder's row, with when this client may take it over.
type lease struct {
	id, token, rvn        int64
	holder                string
	slot                  int
	ttl                   time.Duration
	acquiredAt, renewedAt time.Time
	supervised, stopAsked bool
	process               *coord.ProcessInfo
	raw                   []byte // the process column as read
	end                   time.Time
}

type waiter struct {
	seq    int64
	holder string
	slots  int
	since  time.Time
}

// state is a lock as one transaction read it.
type state struct {
	name    string
	last    int64
	slots   int
	holders []lease // by token
	waiters []waiter
	limits  []coord.Limit
	dbNow   time.Time
	room    int // holders the lock may have now (try)
}

// load reads lock name in tx, ends the leases this client has seen
// unrenewed for their TTL (conditionally on their rvn) and drops the waiters
// whose sessions are gone (their advisory lock is free), except me. With
// lock, the lock's row is created if need be and locked.
func (c *coordinator) load(ctx context.Context, tx pgx.Tx, name string, me int64, lock bool) (*state, error) {
	st := &state{name: name, slots: 1}
	q := "SELECT last_token, slots FROM {s}.locks WHERE name = $1"
	if lock {
		q = "INSERT INTO {s}.locks (name) VALUES ($1) ON CONFLICT (name) DO UPDATE SET name = EXCLUDED.name RETURNING last_token, slots"
	}
	// One round trip: the statements run in order, each (READ COMMITTED)
	// seeing what committed before it, so all after the lock's row is locked.
	b := &pgx.Batch{}
	b.Queue(c.sql(q), name)
	b.Queue(c.sql("SELECT "+leaseCols+" FROM {s}.leases WHERE name = $1 ORDER BY token"), name)
	// CASE keeps the advisory lock test to this lock's waiters.
	b.Queue(c.sql(`DELETE FROM {s}.waiters WHERE name = $1 AND seq <> $2 AND
		CASE WHEN name = $1 AND seq <> $2 THEN pg_try_advisory_xact_lock($3, (seq % 2147483647)::int) ELSE false END`), name, me, c.class)
	b.Queue(c.sql("SELECT seq, holder, slots, since FROM {s}.waiters WHERE name = $1 ORDER BY seq"), name)
	b.Queue(c.sql(limitsSQL+"WHERE (NOT prefix AND name = $1) OR (prefix AND starts_with($1, name))"+limitsOrder), name)
	br := tx.SendBatch(ctx, b)
	hs, changed, err := c.readBatch(br, st)
	if err := errors.Join(err, br.Close()); err != nil {
		return nil, err
	}
	if st.holders, err = c.expire(ctx, tx, name, hs); err != nil {
		return nil, err
	}
	if changed {
		if err := c.notify(ctx, tx, name, 0, "", "c"); err != nil {
			return nil, err
		}
	}
	return st, nil
}

// readBatch reads the results of load's batch into st: the leases, and
// whether dead waiters were dropped.
func (c *coordinator) readBatch(br pgx.BatchResults, st *state) ([]lease, bool, error) {
	if err := br.QueryRow().Scan(&st.last, &st.slots); err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return nil, false, err
	}
	rows, err := br.Query()
	if err != nil {
		return nil, false, err
	}
	hs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (lease, error) { return scanLease(r, &st.dbNow) })
	if err != nil {
		return nil, false, err
	}
	tag, err := br.Exec()
	if err != nil {
		return nil, false, err
	}
	rows, err = br.Query()
	if err != nil {
		return nil, false, err
	}
	if st.waiters, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (waiter, error) {
		var w waiter
		err := r.Scan(&w.seq, &w.holder, &w.slots, &w.since)
		return w, err
	}); err != nil {
		return nil, false, err
	}
	rows, err = br.Query()
	if err != nil {
		return nil, false, err
	}
	st.limits, err = pgx.CollectRows(rows, scanLimit)
	return hs, tag.RowsAffected() > 0, err
}

// leaseCols are the columns scanLease reads, after its first ones.
const leaseCols = "id, holder, token, slot, ttl_ms, rvn, acquired_at, renewed_at, supervised, process, stop_asked, now()"

// scanLease reads a row of leaseCols, after the columns of first.
func scanLease(rows pgx.Row, dbNow *time.Time, first ...any) (lease, error) {
	var l lease
	var ms int64
	err := rows.Scan(append(first, &l.id, &l.holder, &l.token, &l.slot, &ms, &l.rvn, &l.acquiredAt, &l.renewedAt, &l.supervised, &l.raw, &l.stopAsked, dbNow)...)
	l.ttl = time.Duration(ms) * time.Millisecond
	if l.raw != nil {
		l.process = new(coord.ProcessInfo)
		_ = json.Unmarshal(l.raw, l.process)
	}
	return l, err
}

type execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// expire ends the leases of lock name (hs: all of them) this client has
// seen unrenewed for their TTL, conditionally on their rvn, and returns the
// others, each with when this client may take it over.
func (c *coordinator) expire(ctx context.Context, q execer, name string, hs []lease) ([]lease, error) {
	now := time.Now() // the rows came back: every rvn read was written before now
	var kept []lease
	keep := map[int64]bool{}
	for _, l := range hs {
		expired, end := c.observe(name, l.id, l.rvn, l.ttl, now)
		if expired {
			tag, err := q.Exec(ctx, c.sql(`WITH d AS (DELETE FROM {s}.leases WHERE id = $1 AND rvn = $2 RETURNING name)
				SELECT pg_notify($3, 'c'), pg_notify($4, $5) FROM d`), l.id, l.rvn, c.chLock(name), c.chWatch, watchPayload(name, 0, ""))
			if err != nil {
				return nil, err
			}
			if tag.RowsAffected() == 1 {
				continue
			}
		}
		l.end = end
		keep[l.id] = true
		kept = append(kept, l)
	}
	c.forget(name, keep)
	return kept, nil
}

// info is what readers see of st.
func (c *coordinator) info(st *state) coord.LockInfo {
	i := coord.LockInfo{Name: st.name, LastToken: uint64(st.last), Waiters: len(st.waiters), Limit: coordkit.EffectiveLimit(st.limits, st.name)}
	for _, w := range st.waiters {
		i.Queue = append(i.Queue, coord.Waiter{Holder: w.holder, Since: w.since})
	}
	now := time.Now()
	hs := make([]coord.HolderInfo, 0, len(st.holders))
	for _, l := range st.holders {
		hs = append(hs, holderInfo(l, now, st.dbNow))
	}
	coordkit.SetHolders(&i, st.slots, hs)
	return i
}

func holderInfo(l lease, now, dbNow time.Time) coord.HolderInfo {
	// Left: until this client would take it over, or the database clock's
	// estimate when smaller (for display only).
	left := min(l.ttl, l.end.Sub(now))
	if est := l.ttl - dbNow.Sub(l.renewedAt); est > 0 && est < left {
		left = est
	}
	return coord.HolderInfo{Slot: l.slot, Holder: l.holder, Token: uint64(l.token), LeaseID: formatID(l.id),
		TTL: l.ttl, TTLLeft: max(left, time.Millisecond), AcquiredAt: l.acquiredAt, Process: l.process}
}

// one is the LockInfo of lock name held by l alone.
func one(name string, l lease) coord.LockInfo {
	i := coord.LockInfo{Name: name}
	coordkit.SetHolders(&i, 1, []coord.HolderInfo{holderInfo(l, time.Now(), time.Now())})
	return i
}

const (
	limitsSQL   = "SELECT name, prefix, max, reason, set_by, set_at FROM {s}.limits "
	limitsOrder = " ORDER BY prefix, name"
)

// limits reads the limits a WHERE clause selects.
func (c *coordinator) limits(ctx context.Context, tx pgx.Tx, where string, args ...any) ([]coord.Limit, error) {
	rows, err := tx.Query(ctx, c.sql(limitsSQL+where+limitsOrder), args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, scanLimit)
}

func scanLimit(r pgx.CollectableRow) (coord.Limit, error) {
	var l coord.Limit
	err := r.Scan(&l.Name, &l.Prefix, &l.Max, &l.Reason, &l.By, &l.At)
	return l, err
}
