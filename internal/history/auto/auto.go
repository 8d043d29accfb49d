// Package auto opens the history store and the guard store that belong to a
// coordinator: the local stores in a local coordinator's state directory,
// the etcd stores under an etcd coordinator's prefix, through its client,
// the PostgreSQL stores in a PostgreSQL coordinator's schema, through its
// pool. The CLI uses it to give every command a coordinator that records
// its lease events:
//
//	c, err := config.Open(ctx, cfg)
//	...
//	r, err := auto.Wrap(c, history.WithLogger(logger))
//	// r is a coord.Coordinator and a history.Store; r.Close() closes c.
package auto

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/guard"
	guardetcd "github.com/fence-dev/fence/pkg/guard/etcdstore"
	guardlocal "github.com/fence-dev/fence/pkg/guard/localstore"
	guardpg "github.com/fence-dev/fence/pkg/guard/pgstore"
	"github.com/fence-dev/fence/pkg/history"
	"github.com/fence-dev/fence/pkg/history/etcdstore"
	"github.com/fence-dev/fence/pkg/history/localstore"
	"github.com/fence-dev/fence/pkg/history/pgstore"
)

// localBackend is what a local coordinator (pkg/coord/local) offers.
type localBackend interface {
	Dir() string
}

// etcdBackend is what an etcd coordinator (pkg/coord/etcd) offers.
type etcdBackend interface {
	Client() *clientv3.Client
	Prefix() string
}

// pgBackend is what a PostgreSQL coordinator (pkg/coord/postgres) offers.
type pgBackend interface {
	Pool() *pgxpool.Pool
}

// Store opens the history store of c (the Recorder's own when c is a
// history.Recorder; its backend otherwise). A coordinator of another kind,
// or invalid options, are refused with an error wrapping coord.ErrInvalid.
// A local history directory that cannot be opened (a symbolic link, another
// user's) does not fail Store: it returns a store whose every call fails
// with that error, so that lease operations go on while reads of the
// history say what is wrong.
func Store(c coord.Coordinator, opts ...history.Option) (history.Store, error) {
	if r, ok := c.(history.Recorder); ok {
		return r.Store(), nil
	}
	c = Backend(c)
	if _, ok := c.(pgBackend); ok {
		return pgstore.New(c, opts...)
	}
	if eb, ok := c.(etcdBackend); ok {
		return etcdstore.New(eb.Client(), eb.Prefix(), opts...)
	}
	if lb, ok := c.(localBackend); ok {
		s, err := localstore.Open(lb.Dir(), opts...)
		if errors.Is(err, coord.ErrInvalid) {
			return nil, err // bad options: Open checks them first
		}
		if err != nil {
			return failing{err}, nil
		}
		return s, nil
	}
	return nil, fmt.Errorf("%w: coordinator %s keeps no history", coord.ErrInvalid, c.Describe())
}

// Guard opens the guard store beside c (or beside the coordinator it
// records the history of): files under a local coordinator's state
// directory, keys under an etcd coordinator's prefix (through its client),
// the guards table of a PostgreSQL coordinator's schema (through its pool).
func Guard(c coord.Coordinator) (guard.Guard, error) {
	c = Backend(c)
	if _, ok := c.(pgBackend); ok {
		return guardpg.New(c)
	}
	if eb, ok := c.(etcdBackend); ok {
		return guardetcd.New(eb.Client(), eb.Prefix()), nil
	}
	if lb, ok := c.(localBackend); ok {
		return guardlocal.Open(lb.Dir())
	}
	return nil, fmt.Errorf("%w: coordinator %s has no guard store", coord.ErrInvalid, c.Describe())
}

// failing is a store that could not be opened.
type failing struct{ err error }

func (f failing) Record(context.Context, history.Event) error   { return f.err }
func (f failing) Append(context.Context, []history.Event) error { return f.err }
func (f failing) Heads(context.Context) ([]history.Head, error) { return nil, f.err }
func (f failing) Since(context.Context, string, uint64) ([]history.Entry, error) {
	return nil, f.err
}
func (f failing) History(context.Context, string, int) ([]history.Event, error) {
	return nil, f.err
}

// Backend returns the coordinator that c records the history of, when c is
// a history.Recorder, else c: the backend, for its own methods (etcd's
// Client).
func Backend(c coord.Coordinator) coord.Coordinator {
	for {
		r, ok := c.(history.Recorder)
		if !ok {
			return c
		}
		c = r.Unwrap()
	}
}

// Wrap returns c decorated with a history.Recorder on its own store; c
// itself when it is a Recorder already.
func Wrap(c coord.Coordinator, opts ...history.Option) (history.Recorder, error) {
	if r, ok := c.(history.Recorder); ok {
		return r, nil // not through other decorators: they would be lost
	}
	s, err := Store(c, opts...)
	if err != nil {
		return nil, err
	}
	return history.Wrap(c, s, opts...), nil
}
