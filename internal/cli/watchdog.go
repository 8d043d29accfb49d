package cli

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"

	"github.com/fence-dev/fence/internal/config"
	"github.com/fence-dev/fence/internal/history/auto"
	"github.com/fence-dev/fence/internal/supervise"
	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/history"
)

// handover lets the watchdog end the leases of a run on cfg's coordinator
// when fence dies. cfg is read when the command starts: the coordinator
// was opened then, and the password read from its file. The settings reach
// the watchdog in the start order over its order pipe, never in its
// arguments or the command's environment: they may hold the password.
func handover(cfg *config.Config) *supervise.Handover {
	return &supervise.Handover{Coordinator: func() ([]byte, error) {
		c := *cfg
		c.StateDir = cfg.LocalStateDir()
		return json.Marshal(&c)
	}}
}

// endLeases is the watchdog's supervise.LeaseEnder: it opens the coordinator
// of settings (handover's) and releases each lease, as fence
// would have: the history records each as released (events it cannot
// write go to the host's spool, as fence's do).
func endLeases(ctx context.Context, settings []byte, leases []coord.Lease) error {
	cfg := &config.Config{}
	if err := json.Unmarshal(settings, cfg); err != nil {
		return err
	}
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
