package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/internal/coordkit"
)

// SetLimit records l (coord.Limiter); waiters are told at its commit, by
// the same statement.
func (c *coordinator) SetLimit(ctx context.Context, l coord.Limit) error {
	if err := coord.ValidateLimit(l); err != nil {
		return err
	}
	if l.At.IsZero() {
		l.At = time.Now()
	}
	_, err := c.pool.Exec(ctx, c.SQL(`WITH u AS (INSERT INTO {s}.limits (name, prefix, max, reason, set_by, set_at) VALUES ($1, $2, $3, $4, $5, $6)
		ON CONFLICT (name, prefix) DO UPDATE SET max = $3, reason = $4, set_by = $5, set_at = $6 RETURNING 1)
		SELECT pg_notify($7, $1) FROM u`), l.Name, l.Prefix, l.Max, l.Reason, l.By, l.At, c.chLimit)
	return c.MapErr(ctx, "limit", err)
}

// ClearLimit removes the limit of a scope, and tells the waiters in the
// same statement.
func (c *coordinator) ClearLimit(ctx context.Context, name string, prefix bool) (coord.Limit, bool, error) {
	if err := coord.ValidateLimit(coord.Limit{Name: name, Prefix: prefix}); err != nil {
		return coord.Limit{}, false, err
	}
	var l coord.Limit
	err := c.pool.QueryRow(ctx, c.SQL(`WITH d AS (DELETE FROM {s}.limits WHERE name = $1 AND prefix = $2 RETURNING *)
		SELECT name, prefix, max, reason, set_by, set_at, pg_notify($3, $1)::text FROM d`), name, prefix, c.chLimit).
		Scan(&l.Name, &l.Prefix, &l.Max, &l.Reason, &l.By, &l.At, nil)
	if errors.Is(err, pgx.ErrNoRows) {
		return coord.Limit{}, false, nil
	}
	if err != nil {
		return coord.Limit{}, false, c.MapErr(ctx, "thaw", err)
	}
	return l, true, nil
}

// Limits returns every limit, lock limits first, each by name.
func (c *coordinator) Limits(ctx context.Context) ([]coord.Limit, error) {
	_, ls, err := c.read(ctx, c.pool, "", false) // no lock is named ""
	slices.SortFunc(ls, func(a, b coord.Limit) int {
		switch {
		case a.Prefix == b.Prefix:
			return strings.Compare(a.Name, b.Name)
		case b.Prefix:
			return -1
		}
		return 1
	})
	return ls, c.MapErr(ctx, "limits", err)
}

const completionCols = "lock, key, holder, token, started_ns, finished_ns, expires"

func scanCompletion(r pgx.CollectableRow) (coord.Completion, error) {
	var rec coord.Completion
	var tok int64
	var started, finished int64
	err := r.Scan(&rec.Lock, &rec.Key, &rec.Holder, &tok, &started, &finished, &rec.Expires)
	rec.Token = uint64(tok)
	rec.Started, rec.Finished = unixNano(started), unixNano(finished)
	return rec, err
}

// Completion reads the record of (lock, key).
func (c *coordinator) Completion(ctx context.Context, lock, key string) (coord.Completion, bool, error) {
	if err := coordkit.CheckOnce(lock, key, 0); err != nil {
		return coord.Completion{}, false, err
	}
	recs, err := c.completions(ctx, "SELECT "+completionCols+" FROM {s}.completions WHERE lock = $1 AND key = $2 AND expires > now()", lock, key)
	if err != nil || len(recs) == 0 {
		return coord.Completion{}, false, err
	}
	return recs[0], true, nil
}

// completions reads the records a query selects.
func (c *coordinator) completions(ctx context.Context, q string, args ...any) ([]coord.Completion, error) {
	rows, err := c.pool.Query(ctx, c.SQL(q), args...)
	if err != nil {
		return nil, c.MapErr(ctx, "once", err)
	}
	recs, err := pgx.CollectRows(rows, scanCompletion)
	return recs, c.MapErr(ctx, "once", err)
}

// write stores rec for keep; with replace it replaces a live record.
func (c *coordinator) write(ctx context.Context, tx pgx.Tx, rec coord.Completion, keep time.Duration, replace bool) error {
	var started int64
	if !rec.Started.IsZero() {
		started = rec.Started.UnixNano()
	}
	rec, keep = coordkit.Stamp(rec, keep) // Expires is now() + keep, the server's
	cond := "WHERE {s}.completions.expires <= now()"
	if replace {
		cond = ""
	}
	_, err := tx.Exec(ctx, c.SQL(`INSERT INTO {s}.completions (`+completionCols+`)
		VALUES ($1, $2, $3, $4, $5, $6, now() + $7 * interval '1 millisecond')
		ON CONFLICT (lock, key) DO UPDATE SET holder = $3, token = $4, started_ns = $5, finished_ns = $6, expires = EXCLUDED.expires `+cond),
		rec.Lock, rec.Key, rec.Holder, int64(rec.Token), started, rec.Finished.UnixNano(), keep.Milliseconds())
	return err
}

// Complete writes the record in the transaction that checks that the lease
// still holds the lock (its row, locked against takeover until commit).
func (c *coordinator) Complete(ctx context.Context, leaseID string, rec coord.Completion, keep time.Duration) error {
	if err := coordkit.CheckOnce(rec.Lock, rec.Key, keep); err != nil {
		return err
	}
	id, err := parseID(leaseID)
	if err != nil {
		return err
	}
	return c.tx(ctx, c.pool, "once", func(tx pgx.Tx) error {
		var tok int64
		err := tx.QueryRow(ctx, c.SQL("SELECT holder, token FROM {s}.leases WHERE id = $1 AND name = $2 FOR SHARE"), id, rec.Lock).Scan(&rec.Holder, &tok)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("%s: cannot record the completion of %q: %w: lease %s no longer holds the lock", rec.Lock, rec.Key, coord.ErrLeaseLost, leaseID)
		}
		if err != nil {
			return err
		}
		rec.Token = uint64(tok)
		return c.write(ctx, tx, rec, keep, false)
	})
}

// Mark writes rec without a lease, replacing the record of its key.
func (c *coordinator) Mark(ctx context.Context, rec coord.Completion, keep time.Duration) error {
	if err := coordkit.CheckOnce(rec.Lock, rec.Key, keep); err != nil {
		return err
	}
	return c.tx(ctx, c.pool, "once", func(tx pgx.Tx) error { return c.write(ctx, tx, rec, keep, true) })
}

// Forget removes the record of (lock, key).
func (c *coordinator) Forget(ctx context.Context, lock, key string) (bool, error) {
	if err := coordkit.CheckOnce(lock, key, 0); err != nil {
		return false, err
	}
	tag, err := c.pool.Exec(ctx, c.SQL("DELETE FROM {s}.completions WHERE lock = $1 AND key = $2 AND expires > now()"), lock, key)
	if err != nil {
		return false, c.MapErr(ctx, "once", err)
	}
	return tag.RowsAffected() > 0, nil
}

// Completions lists the records of lock by key, dropping expired ones (the
// delete and the read see the same now()).
func (c *coordinator) Completions(ctx context.Context, lock string) ([]coord.Completion, error) {
	if err := coord.ValidateName(lock); err != nil {
		return nil, err
	}
	return c.completions(ctx, `WITH d AS (DELETE FROM {s}.completions WHERE lock = $1 AND expires <= now())
		SELECT `+completionCols+` FROM {s}.completions WHERE lock = $1 AND expires > now() ORDER BY key`, lock)
}

func unixNano(ns int64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns).UTC()
}
