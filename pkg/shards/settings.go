package shards

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/guard"
)

// Settings are a group's persistent operator settings: drained members and
// the serial kill switch. They are stored as one fenced guard value,
// settingsOf(group), written only under a lease on the lock of that name:
// Update takes that lease, reads the value, changes it and writes it with
// the lease's token, so two operators never lose each other's change, and
// one frozen past its lease is refused (guard.ErrStale) instead of
// overwriting a later change. The lease's acquisition and release are also
// what tells the members (they watch the group's locks) to read them again.
type Settings struct {
	// Drained members take no shard and give theirs away.
	Drained []string `json:"drained,omitempty"`
	// Serial, when set, puts one member in charge of every shard: the one
	// it names, or, when that is "" or not a live undrained member, the
	// first live undrained member in byte order.
	Serial *string `json:"serial,omitempty"`
}

// settingsOf is the name of group's settings: their guard key, and the
// lock under which they are written.
func settingsOf(group string) string { return group + "/settings" }

// LoadSettings reads group's settings (the zero Settings when none were
// written).
func LoadSettings(ctx context.Context, g guard.Guard, group string) (Settings, error) {
	var st Settings
	v, err := g.Get(ctx, settingsOf(group))
	switch {
	case errors.Is(err, guard.ErrNotFound):
		return st, nil
	case err != nil:
		return st, fmt.Errorf("read the settings of group %q: %w", group, err)
	}
	if len(v.Data) == 0 {
		return st, nil
	}
	if err := json.Unmarshal(v.Data, &st); err != nil {
		return st, fmt.Errorf("%w: the settings of group %q are not valid: %v", coord.ErrUnavailable, group, err)
	}
	return st, nil
}

// UpdateSettings changes group's settings with change, under a lease on
// settingsOf(group) (waiting for it up to wait), and returns them as
// written.
func UpdateSettings(ctx context.Context, c coord.Coordinator, g guard.Guard, group string, wait time.Duration, change func(*Settings)) (Settings, error) {
	if err := ValidateGroup(group); err != nil {
		return Settings{}, err
	}
	l, err := c.Acquire(ctx, settingsOf(group), coord.AcquireOptions{TTL: 10 * time.Second, Wait: wait, Holder: coord.DefaultHolder()})
	if err != nil {
		return Settings{}, fmt.Errorf("lock the settings of group %q: %w", group, err)
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = c.Release(rctx, l.Name, l.ID)
	}()
	st, err := LoadSettings(ctx, g, group)
	if err != nil {
		return st, err
	}
	change(&st)
	slices.Sort(st.Drained)
	st.Drained = slices.Compact(st.Drained)
	b, err := json.Marshal(st)
	if err != nil {
		return st, err
	}
	if err := g.Put(ctx, settingsOf(group), l.Token, b); err != nil {
		return st, fmt.Errorf("write the settings of group %q: %w", group, err)
	}
	return st, nil
}
