package postgres

import (
	"context"
	"encoding/json"
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

// load reads lock name in tx for a try by the caller at place me in the
// queue (0: none): it creates the lock's row if need be and locks it, drops
// the waiters whose sessions are gone (their advisory lock is free), except
// me, and reads the lock (readSQL, expire).
func (c *coordinator) load(ctx context.Context, tx pgx.Tx, name string, me int64) (*state, error) {
	var sts []*state
	var limits []coord.Limit
	var dropped bool
	// One round trip: the statements run in order, each (READ COMMITTED)
	// seeing what committed before it, so all after the lock's row is locked.
	b := &pgx.Batch{}
	b.Queue(c.SQL("INSERT INTO {s}.locks (name) VALUES ($1) ON CONFLICT (name) DO UPDATE SET name = EXCLUDED.name"), name)
	// CASE keeps the advisory lock test to this lock's waiters.
	b.Queue(c.SQL(`DELETE FROM {s}.waiters WHERE name = $1 AND seq <> $2 AND
		CASE WHEN name = $1 AND seq <> $2 THEN pg_try_advisory_xact_lock($3, (seq % 2147483647)::int) ELSE false END`), name, me, c.class).
		Exec(func(tag pgconn.CommandTag) error { dropped = tag.RowsAffected() > 0; return nil })
	b.Queue(c.readSQL(false), name, c.class, me).Query(func(rows pgx.Rows) (err error) { sts, limits, err = readRows(rows); return err })
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return nil, err
	}
	st := find(sts, limits, name)
	err := c.expire(ctx, tx, st)
	if err == nil && dropped {
		_, err = c.notify(ctx, tx, name, "c", "")
	}
	return st, err
}

// read reads the locks whose names start with name, or with one the lock
// name, and ends the leases this client has seen unrenewed for their TTL
// (expire). It returns them in the order read, and every limit.
func (c *coordinator) read(ctx context.Context, q querier, name string, prefix bool) ([]*state, []coord.Limit, error) {
	rows, err := q.Query(ctx, c.readSQL(prefix), name, c.class, 0)
	if err != nil {
		return nil, nil, err
	}
	sts, limits, err := readRows(rows)
	for _, st := range sts {
		if err == nil {
			err = c.expire(ctx, q, st)
		}
	}
	return sts, limits, err
}

// one reads lock name (read).
func (c *coordinator) one(ctx context.Context, q querier, name string) (*state, error) {
	sts, limits, err := c.read(ctx, q, name, false)
	return find(sts, limits, name), err
}

// find is the state of lock name in sts, a free lock's when it has none.
func find(sts []*state, limits []coord.Limit, name string) *state {
	for _, st := range sts {
		if st.name == name {
			return st
		}
	}
	return &state{name: name, slots: 1, limits: limits}
}

// readSQL reads, in one statement, every lease and live waiter (or the
// caller's own place, $3) of the locks whose names start with $1 (prefix)
// or are $1, the row of lock $1, and every limit, as rows of kind, name,
// last_token and slots of the lock, then leaseCols (waiters: seq, holder, 0,
// slots, ..., since; limits: max as last_token, prefix as slots, set_by as
// holder, reason as process). $2 is the class of the waiters' advisory
// locks; CASE keeps their test to the locks read.
func (c *coordinator) readSQL(prefix bool) string {
	m := func(col string) string {
		if prefix {
			return "starts_with(" + col + ", $1)"
		}
		return col + " = $1"
	}
	return c.SQL(`SELECT 'h', l.name, k.last_token, k.slots, l.id, l.holder, l.token, l.slot, l.ttl_ms, l.rvn,
	l.acquired_at, l.renewed_at, l.supervised, l.process, l.stop_asked, now()
	FROM {s}.leases l JOIN {s}.locks k ON k.name = l.name WHERE ` + m("l.name") + `
UNION ALL SELECT 'w', w.name, k.last_token, k.slots, w.seq, w.holder, 0, w.slots, 0, 0, w.since, w.since, false, NULL, false, now()
	FROM {s}.waiters w JOIN {s}.locks k ON k.name = w.name
	WHERE CASE WHEN ` + m("w.name") + ` THEN w.seq = $3 OR NOT pg_try_advisory_xact_lock($2, (w.seq % 2147483647)::int) ELSE false END
UNION ALL SELECT 'k', name, last_token, slots, 0, '', 0, 0, 0, 0, now(), now(), false, NULL, false, now() FROM {s}.locks WHERE name = $1
UNION ALL SELECT 'l', name, max, prefix::int, 0, set_by, 0, 0, 0, 0, set_at, set_at, false, to_jsonb(reason), false, now() FROM {s}.limits
ORDER BY 1, 2, 7, 5`)
}

// readRows reads the rows of readSQL: the locks in the order read, each
// with every limit, and the limits.
func readRows(rows pgx.Rows) ([]*state, []coord.Limit, error) {
	defer rows.Close()
	var sts []*state
	var limits []coord.Limit
	byName := map[string]*state{}
	for rows.Next() {
		var kind, name string
		var last, ms int64
		var slots int
		var now time.Time
		var l lease
		if err := rows.Scan(&kind, &name, &last, &slots, &l.id, &l.holder, &l.token, &l.slot, &ms, &l.rvn,
			&l.acquiredAt, &l.renewedAt, &l.supervised, &l.raw, &l.stopAsked, &now); err != nil {
			return nil, nil, err
		}
		if kind == "l" {
			lim := coord.Limit{Name: name, Max: int(last), Prefix: slots == 1, By: l.holder, At: l.acquiredAt}
			_ = json.Unmarshal(l.raw, &lim.Reason)
			limits = append(limits, lim)
			continue
		}
		st := byName[name]
		if st == nil {
			st = &state{name: name, last: last, slots: slots, dbNow: now}
			byName[name] = st
			sts = append(sts, st)
		}
		switch kind {
		case "h":
			l.ttl = time.Duration(ms) * time.Millisecond
			if l.raw != nil {
				l.process = new(coord.ProcessInfo)
				_ = json.Unmarshal(l.raw, l.process)
			}
			st.holders = append(st.holders, l)
		case "w":
			st.waiters = append(st.waiters, waiter{seq: l.id, holder: l.holder, slots: l.slot, since: l.acquiredAt})
		}
	}
	for _, st := range sts {
		st.limits = limits
	}
	return sts, limits, rows.Err()
}

// querier is the pool, a connection or a transaction.
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// expire ends the leases of st this client has seen unrenewed for their
// TTL, conditionally on their rvn, and keeps the others, each with when
// this client may take it over.
func (c *coordinator) expire(ctx context.Context, q querier, st *state) error {
	now := time.Now() // the rows came back: every rvn read was written before now
	var kept []lease
	keep := map[int64]bool{}
	for _, l := range st.holders {
		expired, end := c.observe(st.name, l.id, l.rvn, l.ttl, now)
		if expired {
			ended, err := c.notify(ctx, q, st.name, "c", "DELETE FROM {s}.leases WHERE id = $1 AND rvn = $2", l.id, l.rvn)
			if err != nil {
				return err
			}
			if ended {
				continue
			}
		}
		l.end = end
		keep[l.id] = true
		kept = append(kept, l)
	}
	c.forget(st.name, keep)
	st.holders = kept
	return nil
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
		// Left: until this client would take it over, or the database
		// clock's estimate when smaller (for display only).
		left := min(l.ttl, l.end.Sub(now))
		if est := l.ttl - st.dbNow.Sub(l.renewedAt); est > 0 && est < left {
			left = est
		}
		hs = append(hs, coord.HolderInfo{Slot: l.slot, Holder: l.holder, Token: uint64(l.token), LeaseID: formatID(l.id),
			TTL: l.ttl, TTLLeft: max(left, time.Millisecond), AcquiredAt: l.acquiredAt, Process: l.process})
	}
	coordkit.SetHolders(&i, st.slots, hs)
	return i
}
