package config

import (
	"fmt"

	"github.com/fence-dev/fence/internal/history/auto"
	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/coord/etcd"
	"github.com/fence-dev/fence/pkg/guard"
	"github.com/fence-dev/fence/pkg/guard/etcdstore"
	"github.com/fence-dev/fence/pkg/guard/localstore"
)

// ErrNoGuardStore is OpenGuard's error for a coordinator whose guard store
// is not in this build (PostgreSQL, for now); it wraps ErrConfig (exit 125).
var ErrNoGuardStore = &configError{"no guard store on PostgreSQL in this build: fence guard and shard settings need the local or etcd coordinator"}

// OpenGuard returns the guard store that lives beside the coordinator c,
// which Open returned for cfg: files under the state directory for local,
// keys under the prefix for etcd (through c's client).
func OpenGuard(cfg *Config, c coord.Coordinator) (guard.Guard, error) {
	if ec, ok := auto.Backend(c).(*etcd.Coordinator); ok {
		return etcdstore.New(ec.Client(), ec.Prefix()), nil
	}
	// The one switch where the guard store is chosen by backend.
	if cfg.Backend() == "postgres" {
		return nil, ErrNoGuardStore
	}
	if len(cfg.Endpoints) > 0 {
		return nil, fmt.Errorf("internal error: coordinator %s is not etcd", c.Describe())
	}
	return localstore.Open(cfg.LocalStateDir())
}
