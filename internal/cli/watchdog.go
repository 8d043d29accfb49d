package cli

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"time"

	"github.com/fence-dev/fence/internal/config"
	"github.com/fence-dev/fence/internal/history/auto"
	"github.com/fence-dev/fence/internal/supervise"
	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/history"
)

// watchdogCoordinator is the coordinator's settings as this fence resolved
// them, for the watchdog of `fence run` to end the leases itself when fence
// dies (supervise.Handover). They reach the watchdog in the start order over
// its order pipe, never in its arguments or the command's environment: they
// may hold the etcd password.
type watchdogCoordinator struct {
	StateDir          string        `json:"state_dir"`
	Endpoints         []string      `json:"endpoints,omitempty"`
	Prefix            string        `json:"prefix,omitempty"`
	CACert            string        `json:"cacert,omitempty"`
	Cert              string        `json:"cert,omitempty"`
	Key               string        `json:"key,omitempty"`
	User              string        `json:"user,omitempty"`
	Password          string        `json:"password,omitempty"`
	Postgres          string        `json:"postgres,omitempty"`
	PostgresSchema    string        `json:"postgres_schema,omitempty"`
	InsecureTransport bool          `json:"insecure_transport,omitempty"`
	DialTimeout       time.Duration `json:"dial_timeout,omitempty"`
}

// handover lets the watchdog end the leases of a run on cfg's coordinator
// when fence dies. cfg is read when the command starts: the coordinator
// was opened then, and the password read from its file.
func handover(cfg *config.Config) *supervise.Handover {
	return &supervise.Handover{Coordinator: func() ([]byte, error) {
		return json.Marshal(watchdogCoordinator{
			StateDir: cfg.LocalStateDir(), Endpoints: cfg.Endpoints, Prefix: cfg.Prefix,
			CACert: cfg.CACert, Cert: cfg.Cert, Key: cfg.Key, User: cfg.User, Password: cfg.Password,
			Postgres: cfg.Postgres, PostgresSchema: cfg.PostgresSchema,
			InsecureTransport: cfg.InsecureTransport, DialTimeout: cfg.DialTimeout,
		})
	}}
}

// endLeases is the watchdog's supervise.LeaseEnder: it opens the coordinator
// of settings (a watchdogCoordinator) and releases each lease, as fence
// would have: the history records each as released (events it cannot
// write go to the host's spool, as fence's do).
func endLeases(ctx context.Context, settings []byte, leases []coord.Lease) error {
	var s watchdogCoordinator
	if err := json.Unmarshal(settings, &s); err != nil {
		return err
	}
	cfg := &config.Config{StateDir: s.StateDir, Endpoints: s.Endpoints, Prefix: s.Prefix,
		CACert: s.CACert, Cert: s.Cert, Key: s.Key, User: s.User, Password: s.Password,
		Postgres: s.Postgres, PostgresSchema: s.PostgresSchema,
		InsecureTransport: s.InsecureTransport, DialTimeout: s.DialTimeout}
	inner, err := config.Open(ctx, cfg)
	if err != nil {
		return err
	}
	// Nothing of the watchdog's goes to the command's stderr.
	opts := []history.Option{history.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))}
	if dir := spoolDir(cfg); dir != "" {
		opts = append(opts, history.WithSpool(dir))
	}
	var c coord.Coordinator
	if c, err = auto.Wrap(inner, opts...); err != nil {
		inner.Close()
		return err
	}
	for _, l := range leases {
		err = errors.Join(err, c.Release(ctx, l.Name, l.ID))
	}
	if cc, ok := c.(interface{ CloseContext(context.Context) error }); ok {
		return errors.Join(err, cc.CloseContext(ctx))
	}
	return errors.Join(err, c.Close())
}
