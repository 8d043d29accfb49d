package config

import (
	"fmt"

	"github.com/fence-dev/fence/internal/history/auto"
	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/guard"
	"github.com/fence-dev/fence/pkg/guard/etcdstore"
	"github.com/fence-dev/fence/pkg/guard/localstore"
	"github.com/fence-dev/fence/pkg/guard/pgstore"
	"github.com/jackc/pgx/v5/pgxpool"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// OpenGuard returns the guard store that lives beside the coordinator c,
// which Open returned for cfg: files under the state directory for local,
// keys under the prefix for etcd (through c's client), the guards table
// of the schema for PostgreSQL (through c's pool).
func OpenGuard(cfg *Config, c coord.Coordinator) (guard.Guard, error) {
	if ec, ok := auto.Backend(c).(interface { // package etcd's coordinator
		Client() *clientv3.Client
		Prefix() string
	}); ok {
		return etcdstore.New(ec.Client(), ec.Prefix()), nil
	}
	if b := auto.Backend(c); isPostgres(b) {
		return pgstore.New(b)
	}
	if len(cfg.Endpoints) > 0 {
		return nil, fmt.Errorf("internal error: coordinator %s is not etcd", c.Describe())
	}
	return localstore.Open(cfg.LocalStateDir())
}

// isPostgres reports whether c is a coordinator of pkg/coord/postgres.
func isPostgres(c coord.Coordinator) bool {
	_, ok := c.(interface{ Pool() *pgxpool.Pool })
	return ok
}
