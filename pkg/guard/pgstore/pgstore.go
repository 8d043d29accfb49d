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
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/guard"
	"github.com/fence-dev/fence/pkg/guard/sqlguard"
)

// store is a guard.Guard in PostgreSQL.
type store struct {
	c backend
	t *sqlguard.Table
}

// backend is what a coordinator of pkg/coord/postgres offers its stores.
type backend interface {
	Pool() *pgxpool.Pool
	Schema() string
	MapErr(ctx context.Context, op string, err error) error
}

// New returns the store in the schema of c, a coordinator of
// pkg/coord/postgres (any other is refused with coord.ErrInvalid). It does
// not own c.
func New(c coord.Coordinator) (guard.Guard, error) {
	b, ok := c.(backend)
	if !ok {
		return nil, fmt.Errorf("%w: coordinator %s is not PostgreSQL", coord.ErrInvalid, c.Describe())
	}
	t, err := sqlguard.New(stdlib.OpenDBFromPool(b.Pool()), sqlguard.Postgres, "guards",
		sqlguard.WithSchema(b.Schema()), sqlguard.WithColumns("key", "", ""))
	if err != nil {
		return nil, err
	}
	return &store{c: b, t: t}, nil
}

// Put implements guard.Guard.
func (s *store) Put(ctx context.Context, key string, token uint64, value []byte) error {
	return s.mapErr(ctx, key, s.t.Put(ctx, key, token, value))
}

// Get implements guard.Guard.
func (s *store) Get(ctx context.Context, key string) (guard.Value, error) {
	v, err := s.t.Get(ctx, key)
	return v, s.mapErr(ctx, key, err)
}

func (s *store) mapErr(ctx context.Context, key string, err error) error {
	if err == nil || errors.Is(err, guard.ErrStale) || errors.Is(err, guard.ErrNotFound) || errors.Is(err, coord.ErrInvalid) {
		return err
	}
	return s.c.MapErr(ctx, "guard "+key, err)
}
