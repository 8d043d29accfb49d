package config

import (
	"context"
	"errors"

	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/coord/etcd"
	"github.com/fence-dev/fence/pkg/coord/local"
	"github.com/fence-dev/fence/pkg/coord/postgres"
)

// DefaultStateDir is the local coordinator's directory when --state-dir is
// not set.
func DefaultStateDir() string { return local.DefaultDir() }

// LocalStateDir is the state directory of the local coordinator that cfg
// selects: StateDir, else DefaultStateDir(). Open, the guard store and the
// environment fence run gives its command all take it from here.
func (c *Config) LocalStateDir() string {
	if c.StateDir != "" {
		return c.StateDir
	}
	return DefaultStateDir()
}

// Open validates cfg and opens the coordinator it selects (Backend):
// PostgreSQL, etcd, or local in StateDir. Errors wrap coord.ErrUnavailable
// or ErrConfig (both exit 125).
func Open(ctx context.Context, cfg *Config) (coord.Coordinator, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	switch cfg.Backend() {
	case "local":
		return local.Open(cfg.LocalStateDir())
	case "postgres":
		return postgres.Open(ctx, cfg.PostgresConn(), postgres.WithSchema(cfg.PostgresSchema))
	}
	tc, err := cfg.TLSConfig()
	if err != nil {
		return nil, err
	}
	c, err := etcd.New(ctx, cfg.Endpoints, etcd.WithPrefix(cfg.Prefix), etcd.WithDialTimeout(cfg.DialTimeout),
		etcd.WithTLS(tc), etcd.WithAuth(cfg.User, cfg.Password))
	if errors.Is(err, coord.ErrUnavailable) && tc != nil && ctx.Err() == nil {
		if terr := diagnoseTLS(ctx, cfg.Endpoints, tc, cfg.DialTimeout); terr != nil {
			return nil, terr
		}
	}
	return c, err // an error names the endpoints already
}
