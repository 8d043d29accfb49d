package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/internal/coordkit"
)

// args checks a lock name and a lease id.
func args(name, leaseID string) (int64, error) {
	if err := coord.ValidateName(name); err != nil {
		return 0, err
	}
	return parseID(leaseID)
}

// gone is the error for lease id not found on lock name: ErrInvalid when it
// is another lock's, else lost (nil for a release).
func (c *coordinator) gone(ctx context.Context, name string, id int64, lost error) error {
	var other string
	err := c.pool.QueryRow(ctx, c.SQL("SELECT name FROM {s}.leases WHERE id = $1"), id).Scan(&other)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return lost
	case err != nil:
		return c.MapErr(ctx, "lease "+formatID(id), err)
	}
	return fmt.Errorf("%w: lease %s belongs to lock %q, not %q", coord.ErrInvalid, formatID(id), other, name)
}

// Renew writes a new record version: contenders start counting again.
func (c *coordinator) Renew(ctx context.Context, name, leaseID string) (coord.Renewal, error) {
	id, err := args(name, leaseID)
	if err != nil {
		return coord.Renewal{}, err
	}
	rvn, sent := random(), time.Now()
	var ms int64
	err = c.pool.QueryRow(ctx, c.SQL(`WITH u AS (UPDATE {s}.leases SET rvn = $3, renewed_at = now() WHERE id = $1 AND name = $2 RETURNING ttl_ms)
		SELECT ttl_ms, pg_notify($4, $5)::text FROM u`), id, name, rvn, c.chLock(name), fmt.Sprintf("r %d %d", id, rvn)).Scan(&ms, nil)
	if errors.Is(err, pgx.ErrNoRows) {
		return coord.Renewal{}, c.gone(ctx, name, id, fmt.Errorf("%w: lease %s on %q", coord.ErrLeaseLost, leaseID, name))
	}
	if err != nil {
		return coord.Renewal{}, c.MapErr(ctx, "renew "+name, err)
	}
	return coord.Renewal{Sent: sent, TTL: time.Duration(ms) * time.Millisecond}, nil
}

// Release ends the lease; one already gone is not an error.
func (c *coordinator) Release(ctx context.Context, name, leaseID string) error {
	id, err := args(name, leaseID)
	if err != nil {
		return err
	}
	if err := c.check(); err != nil {
		return err
	}
	// One statement: the delete and its notifications commit together.
	ended, err := c.notify(ctx, c.pool, name, "f", "DELETE FROM {s}.leases WHERE id = $1 AND name = $2", id, name)
	if err != nil || ended {
		return c.MapErr(ctx, "release "+name, err)
	}
	return c.gone(ctx, name, id, nil)
}

// AttachProcess records the processes of a lease (shown by readers).
func (c *coordinator) AttachProcess(ctx context.Context, name, leaseID string, p coord.ProcessInfo) error {
	id, err := args(name, leaseID)
	if err != nil {
		return err
	}
	if err := coordkit.ValidateProcess(p); err != nil {
		return err
	}
	b, _ := json.Marshal(p)
	tag, err := c.pool.Exec(ctx, c.SQL("UPDATE {s}.leases SET process = $3, supervised = true WHERE id = $1 AND name = $2"), id, name, b)
	if err != nil {
		return c.MapErr(ctx, "attach "+name, err)
	}
	if tag.RowsAffected() == 0 {
		return c.gone(ctx, name, id, fmt.Errorf("%w: lease %s on %q", coord.ErrLeaseLost, leaseID, name))
	}
	return nil
}

// Revoke ends the holder's lease.
func (c *coordinator) Revoke(ctx context.Context, name string) (coord.LockInfo, error) {
	return c.RevokeToken(ctx, name, 0)
}

// holderOf picks the holder with token (0: the only one) of st, with the
// LockInfo of the lock held by it alone.
func (c *coordinator) holderOf(st *state, token uint64) (lease, coord.LockInfo, error) {
	info := c.info(st)
	k := slices.IndexFunc(st.holders, func(h lease) bool { return token == 0 || uint64(h.token) == token })
	switch {
	case len(st.holders) == 0:
		return lease{}, info, fmt.Errorf("%w: %q", coord.ErrNotHeld, st.name)
	case token == 0 && len(st.holders) > 1:
		return lease{}, info, coordkit.ManyHolders(info)
	case k < 0:
		return lease{}, info, fmt.Errorf("%w: lock %q is held by %s (token %d), not token %d", coord.ErrOtherToken, st.name, info.Holder, info.Token, token)
	}
	h := st.holders[k]
	return h, c.info(&state{name: st.name, slots: 1, holders: []lease{h}, dbNow: st.dbNow}), nil
}

// RevokeToken ends the lease of the holder with token (0: the only one).
func (c *coordinator) RevokeToken(ctx context.Context, name string, token uint64) (coord.LockInfo, error) {
	info, _, err := c.onHolder(ctx, "revoke", name, token, func(tx pgx.Tx, h lease) (bool, error) {
		return c.notify(ctx, tx, name, "f", "DELETE FROM {s}.leases WHERE id = $1", h.id)
	})
	return info, err
}

// RequestStop asks a supervised holder to stop (its WatchLease says so).
func (c *coordinator) RequestStop(ctx context.Context, name string, token uint64) (coord.LockInfo, bool, error) {
	return c.onHolder(ctx, "stop", name, token, func(tx pgx.Tx, h lease) (bool, error) {
		if !h.supervised {
			return false, nil
		}
		return c.notify(ctx, tx, name, "c", "UPDATE {s}.leases SET stop_asked = true WHERE id = $1", h.id)
	})
}

// onHolder runs f, in a transaction, on the holder of lock name with token
// (0: the only one); done is f's, when it wrote.
func (c *coordinator) onHolder(ctx context.Context, op, name string, token uint64, f func(pgx.Tx, lease) (bool, error)) (info coord.LockInfo, done bool, err error) {
	if err := coord.ValidateName(name); err != nil {
		return coord.LockInfo{}, false, err
	}
	err = c.tx(ctx, c.pool, op+" "+name, func(tx pgx.Tx) error {
		st, err := c.one(ctx, tx, name)
		if err != nil {
			return err
		}
		var h lease
		if h, info, err = c.holderOf(st, token); err != nil {
			return err
		}
		done, err = f(tx, h)
		return err
	})
	return info, done && err == nil, err
}

// WaitEnded waits until the lease with token no longer holds name.
func (c *coordinator) WaitEnded(ctx context.Context, name string, token uint64) error {
	if err := coord.ValidateName(name); err != nil {
		return err
	}
	if token == 0 {
		return fmt.Errorf("%w: WaitEnded needs a token", coord.ErrInvalid)
	}
	ctx, cancel := c.bound(ctx)
	defer cancel()
	conn, err := c.listen(ctx, c.chLock(name))
	if err != nil {
		return c.MapErr(ctx, "wait "+name, err)
	}
	defer conn.Close(context.Background())
	for {
		if err := c.check(); err != nil {
			return err
		}
		st, err := c.one(ctx, conn, name)
		if err != nil {
			return c.MapErr(ctx, "wait "+name, err)
		}
		k := slices.IndexFunc(st.holders, func(h lease) bool { return uint64(h.token) == token })
		if k < 0 {
			return nil
		}
		if _, err := waitNote(ctx, conn, st.holders[k].end); err != nil {
			return c.MapErr(ctx, "wait "+name, err)
		}
	}
}

// WatchLease reports the end of lease leaseID's hold on name, or a stop
// request (coord.LeaseWatcher).
func (c *coordinator) WatchLease(ctx context.Context, name, leaseID string) (<-chan error, error) {
	id, err := args(name, leaseID)
	if err != nil {
		return nil, err
	}
	if err := c.check(); err != nil {
		return nil, err
	}
	ch := make(chan error, 1)
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		defer close(ch)
		ctx, cancel := c.bound(ctx)
		defer cancel()
		conn, err := c.listen(ctx, c.chLock(name))
		if err != nil {
			return
		}
		defer conn.Close(context.Background())
		for {
			var stop bool
			err := conn.QueryRow(ctx, c.SQL("SELECT stop_asked FROM {s}.leases WHERE id = $1 AND name = $2"), id, name).Scan(&stop)
			switch {
			case errors.Is(err, pgx.ErrNoRows):
				ch <- fmt.Errorf("%w: lease %s no longer holds %q", coord.ErrLeaseLost, leaseID, name)
				return
			case err != nil:
				return
			case stop:
				ch <- fmt.Errorf("%w: the holder of %q (lease %s) was asked to stop", coord.ErrStopRequested, name, leaseID)
				return
			}
			for {
				n, err := waitNote(ctx, conn, time.Time{})
				if err != nil {
					return
				}
				if !strings.HasPrefix(n.Payload, "r ") {
					break
				}
			}
		}
	}()
	return ch, nil
}
