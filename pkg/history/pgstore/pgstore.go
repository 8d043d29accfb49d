// Package pgstore is the history store of fence's PostgreSQL backend: two
// tables in the coordinator's schema (pkg/coord/postgres creates them),
//
//	history (lock, seq, at_ns, event)   one row per event, the event as JSON
//	history_heads (lock, seq)           the number of each lock's latest event
//
// through the coordinator's connection pool. A write is one transaction per
// lock: it raises the head by the number of events (the upsert locks the
// head's row, so concurrent writers in any number of processes take turns
// and lose nothing), inserts the events under the numbers it got, and
// deletes the lock's events beyond the count bound and those past the age
// bound. The table thus never holds more than the bounds. Reads apply the
// bounds too, so that time passing without writes takes events away.
package pgstore

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/history"
	"github.com/fence-dev/fence/pkg/history/internal/codec"
	hopts "github.com/fence-dev/fence/pkg/history/internal/opts"
	"github.com/fence-dev/fence/pkg/history/internal/trim"
)

// store is a history.Store in PostgreSQL.
type store struct {
	c    backend
	opts hopts.Options
}

// backend is what a coordinator of pkg/coord/postgres offers its stores.
type backend interface {
	SQL(q string) string
	Tx(ctx context.Context, op string, f func(pgx.Tx) error) error
}

// New returns the store in the schema of c, a coordinator of
// pkg/coord/postgres (any other is refused with coord.ErrInvalid). It does
// not own c.
func New(c coord.Coordinator, opts ...history.Option) (history.Store, error) {
	b, ok := c.(backend)
	if !ok {
		return nil, fmt.Errorf("%w: coordinator %s is not PostgreSQL", coord.ErrInvalid, c.Describe())
	}
	o, err := hopts.New(opts...)
	if err != nil {
		return nil, err
	}
	return &store{c: b, opts: o}, nil
}

// Record implements history.Store.
func (s *store) Record(ctx context.Context, ev history.Event) error {
	return s.Append(ctx, []history.Event{ev})
}

// Append implements history.Store: one transaction per lock.
func (s *store) Append(ctx context.Context, evs []history.Event) error {
	return trim.EachLock(ctx, s.opts, evs, s.append)
}

func (s *store) append(ctx context.Context, lock string, evs []history.Event) error {
	ats, vals := make([]int64, len(evs)), make([]string, len(evs))
	for i, ev := range evs {
		b, err := codec.Encode(0, ev)
		if err != nil {
			return err
		}
		ats[i], vals[i] = ev.Time.UnixNano(), string(b)
	}
	return s.c.Tx(ctx, "history of "+lock, func(tx pgx.Tx) error {
		var last int64
		err := tx.QueryRow(ctx, s.c.SQL(`INSERT INTO {s}.history_heads AS h (lock, seq) VALUES ($1, $2)
			ON CONFLICT (lock) DO UPDATE SET seq = h.seq + $2 RETURNING seq`), lock, len(evs)).Scan(&last)
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, s.c.SQL(`INSERT INTO {s}.history (lock, seq, at_ns, event)
			SELECT $1, $2 + n, a, e FROM unnest($3::bigint[], $4::text[]) WITH ORDINALITY AS u(a, e, n)`),
			lock, last-int64(len(evs)), ats, vals)
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, s.c.SQL("DELETE FROM {s}.history WHERE lock = $1 AND (seq <= $2 OR at_ns < $3)"),
			lock, last-int64(s.opts.MaxEvents), s.opts.Cutoff().UnixNano())
		return err
	})
}

// History implements history.Store.
func (s *store) History(ctx context.Context, lock string, limit int) ([]history.Event, error) {
	ents, err := s.read(ctx, lock, "AND at_ns >= $2 ORDER BY seq DESC LIMIT $3", s.opts.Cutoff().UnixNano(), s.opts.Window(limit))
	if err != nil {
		return nil, err
	}
	return trim.Newest(s.opts, ents, limit), nil
}

// Since implements history.Store.
func (s *store) Since(ctx context.Context, lock string, after uint64) ([]history.Entry, error) {
	ents, err := s.read(ctx, lock, "AND seq > $2 ORDER BY seq", int64(min(after, coord.MaxToken)))
	if err != nil {
		return nil, err
	}
	return trim.Kept(s.opts, ents, trim.EntryTime, 0), nil
}

// read reads lock's events that a clause (with the arguments from $2 on)
// selects.
func (s *store) read(ctx context.Context, lock, clause string, args ...any) ([]history.Entry, error) {
	if err := coord.ValidateName(lock); err != nil {
		return nil, err
	}
	var ents []history.Entry
	err := s.c.Tx(ctx, "history of "+lock, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, s.c.SQL("SELECT seq, event FROM {s}.history WHERE lock = $1 "+clause), append([]any{lock}, args...)...)
		if err != nil {
			return err
		}
		ents, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (history.Entry, error) {
			var seq int64
			var b []byte
			if err := r.Scan(&seq, &b); err != nil {
				return history.Entry{}, err
			}
			_, ev, err := codec.Decode(b)
			if err == nil && ev.Lock != lock {
				err = fmt.Errorf("it is an event of lock %q", ev.Lock)
			}
			if err != nil {
				return history.Entry{}, fmt.Errorf("%w: history of %q: event %d is corrupt: %v", coord.ErrUnavailable, lock, seq, err)
			}
			return history.Entry{Seq: uint64(seq), Event: ev}, nil
		})
		return err
	})
	return ents, err
}

// Heads implements history.Store.
func (s *store) Heads(ctx context.Context) ([]history.Head, error) {
	var heads []history.Head
	err := s.c.Tx(ctx, "history heads", func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, s.c.SQL("SELECT lock, seq FROM {s}.history_heads ORDER BY lock"))
		if err == nil {
			heads, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (history.Head, error) {
				var h history.Head
				var seq int64
				err := r.Scan(&h.Lock, &seq)
				h.Seq = uint64(seq)
				return h, err
			})
		}
		return err
	})
	return heads, err
}
