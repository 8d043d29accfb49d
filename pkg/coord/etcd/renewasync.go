package etcd

import (
	"context"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fence-dev/fence/pkg/coord"
)

var _ coord.Coordinator = (*coordinator)(nil)

// RenewAsync implements coord.Coordinator: it renews the lease as Renew
// does, with one keep-alive on the shared stream, and returns at once. The
// answer is handed to done by the stream's receiver: no goroutine waits for
// it. A lease that this coordinator did not put on lock name is renewed by
// Renew (read first, then keep-alive) on a goroutine of its own, and so is
// the renewal that has to open the stream.
func (c *coordinator) RenewAsync(name, leaseID string, done func(coord.Renewal, error)) (cancel func()) {
	id, err := c.renewable(name, leaseID)
	if err != nil {
		go done(coord.Renewal{}, err)
		return func() {}
	}
	if !c.leases.owns(name, id) {
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			r, err := c.Renew(ctx, name, leaseID)
			cancel()
			done(r, err)
		}()
		return cancel
	}
	return c.ka.start(id, func(ttl int64, sent time.Time, err error) {
		switch {
		case errors.Is(err, errAbandoned):
			done(coord.Renewal{}, c.mapErr(canceledCtx, "renew", context.Canceled))
		case err != nil:
			done(coord.Renewal{}, c.mapErr(context.Background(), "renew", err))
		case ttl <= 0:
			c.leases.forget(id)
			done(coord.Renewal{}, fmt.Errorf("%w: lease %s on %q has ended", coord.ErrLeaseLost, leaseID, name))
		default:
			d := time.Duration(ttl) * time.Second
			c.leases.acked(id, d, sent)
			done(coord.Renewal{Sent: sent, TTL: d}, nil)
		}
	})
}

// renewable checks Renew's arguments and that the coordinator is open.
func (c *coordinator) renewable(name, leaseID string) (clientv3.LeaseID, error) {
	if err := coord.ValidateName(name); err != nil {
		return 0, err
	}
	id, err := parseID(leaseID)
	if err != nil {
		return 0, err
	}
	return id, c.check()
}

// canceledCtx is a context that has ended, for mapErr of an abandoned
// renewal (the error reads as Renew's when its ctx is cancelled).
var canceledCtx = func() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}()
