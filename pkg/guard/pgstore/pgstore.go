// Package pgstore is the guard store of fence's PostgreSQL backend: the
// table guards (key, value, fence, updated_at) in the coordinator's schema
// (pkg/coord/postgres creates it), written through the coordinator's pool
// by sqlguard's fenced upsert, one statement that compares the stored token
// and writes:
//
//	INSERT INTO fence.guards AS cur (key, value, fence, updated_at) VALUES ($1, $2, $3, $4)
//	ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, fence = EXCLUDED.fence, …
//	WHERE cur.fence <= EXCLUDED.fence
//
// An error of the database is coord.ErrUnavailable.
package pgstore

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5/stdlib"

	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/coord/postgres"
	"github.com/fence-dev/fence/pkg/guard"
	"github.com/fence-dev/fence/pkg/guard/sqlguard"
)

// Store is a guard.Guard in PostgreSQL.
type Store struct {
	c *postgres.Coordinator
	t *sqlguard.Table
}

var _ guard.Guard = (*Store)(nil)

// New returns the store in c's schema. It does not own c.
func New(c *postgres.Coordinator) (*Store, error) {
	t, err := sqlguard.New(stdlib.OpenDBFromPool(c.Pool()), sqlguard.Postgres, "guards",
		sqlguard.WithSchema(c.Schema()), sqlguard.WithColumns("key", "", ""))
	if err != nil {
		return nil, err
	}
	return &Store{c: c, t: t}, nil
}

// Put implements guard.Guard.
func (s *Store) Put(ctx context.Context, key string, token uint64, value []byte) error {
	return s.mapErr(ctx, key, s.t.Put(ctx, key, token, value))
}

// Get implements guard.Guard.
func (s *Store) Get(ctx context.Context, key string) (guard.Value, error) {
	v, err := s.t.Get(ctx, key)
	return v, s.mapErr(ctx, key, err)
}

func (s *Store) mapErr(ctx context.Context, key string, err error) error {
	if err == nil || errors.Is(err, guard.ErrStale) || errors.Is(err, guard.ErrNotFound) || errors.Is(err, coord.ErrInvalid) {
		return err
	}
	return s.c.MapErr(ctx, "guard "+key, err)
}
