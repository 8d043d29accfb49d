package cli

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"

	"github.com/fence-dev/fence/internal/config"
	"github.com/fence-dev/fence/internal/supervise"
	"github.com/fence-dev/fence/pkg/coord"
)

// handover lets the watchdog end the leases of a run on cfg's coordinator
// when fence dies. cfg is read when the command starts: the coordinator
// was opened then, and the password read from its file (how it reaches the
// watchdog: see supervise.Handover).
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
	// Nothing of the watchdog's goes to the command's stderr.
	c, err := openRecorded(ctx, cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		return err
	}
	for _, l := range leases {
		err = errors.Join(err, c.Release(ctx, l.Name, l.ID))
	}
	return errors.Join(err, c.CloseContext(ctx))
}
