package etcd

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fence-dev/fence/pkg/coord"
)

// Renew extends the lease by its TTL with one keep-alive on the
// Coordinator's shared stream (see keeper); the Renewal reports the
// request's send time and the TTL granted. A lease id given with the wrong
// lock name is ErrLeaseLost and is not renewed: unless this Coordinator put
// the lease's key on lock name itself, a linearizable read checks that the
// key is there first. Once the key is known, the only ways it can go are the
// lease ending (the keep-alive then says so) or a foreign delete; fence
// itself removes a key only by revoking its lease.
func (c *Coordinator) Renew(ctx context.Context, name, leaseID string) (coord.Renewal, error) {
	if err := coord.ValidateName(name); err != nil {
		return coord.Renewal{}, err
	}
	id, err := parseID(leaseID)
	if err != nil {
		return coord.Renewal{}, err
	}
	if err := c.check(); err != nil {
		return coord.Renewal{}, err
	}
	if !c.leases.owns(name, id) {
		if err := c.ownsKey(ctx, name, id, "renew"); err != nil {
			return coord.Renewal{}, err
		}
	}
	ttl, sent, err := c.ka.renew(ctx, id)
	switch {
	case err != nil:
		return coord.Renewal{}, c.mapErr(ctx, "renew", err)
	case ttl <= 0:
		c.leases.forget(id)
		return coord.Renewal{}, fmt.Errorf("%w: lease %s on %q has ended", coord.ErrLeaseLost, leaseID, name)
	}
	c.leases.acked(id, time.Duration(ttl)*time.Second, sent)
	return coord.Renewal{Sent: sent, TTL: time.Duration(ttl) * time.Second}, nil
}

// ownsKey checks that lease id has its key on lock name.
func (c *Coordinator) ownsKey(ctx context.Context, name string, id clientv3.LeaseID, op string) error {
	resp, err := c.cli.Get(ctx, c.leaseKey(name, id), clientv3.WithCountOnly())
	if err != nil {
		return c.mapErr(ctx, op, err)
	}
	if resp.Count == 0 {
		return fmt.Errorf("%w: lease %s holds no place on %q", coord.ErrLeaseLost, formatID(id), name)
	}
	return nil
}

// Release revokes the lease, which removes its key (a Coordinator that
// acquires in a loop deletes the key and keeps the lease: see leases). A lease that is gone,
// or that is not on lock name, is left alone and is not an error (a lease
// this Coordinator did not put on lock name itself is read first).
func (c *Coordinator) Release(ctx context.Context, name, leaseID string) error {
	if err := coord.ValidateName(name); err != nil {
		return err
	}
	id, err := parseID(leaseID)
	if err != nil {
		return err
	}
	if err := c.check(); err != nil {
		return err
	}
	if o, keep := c.leases.keep(name, id); keep {
		// A Coordinator that acquires in a loop keeps the lease for the
		// lock's next acquisition (see leases) and deletes only the key.
		if _, err := c.cli.Delete(ctx, c.leaseKey(name, id)); err != nil {
			c.leases.drop(name, o)
			return c.mapErr(ctx, "release", err)
		}
		c.leases.kept(name, id, o)
		return nil
	}
	if !c.leases.owns(name, id) {
		if err := c.ownsKey(ctx, name, id, "release"); err != nil {
			if errors.Is(err, coord.ErrLeaseLost) {
				return nil
			}
			return err
		}
	}
	if err := c.revokeBounded(ctx, id); err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return c.mapErr(ctx, "release", err)
	}
	c.leases.forget(id)
	return nil
}

// Revoke ends the lease of the current holder of name, whoever holds it,
// and returns the holder it ended. The first waiter then holds the lock.
func (c *Coordinator) Revoke(ctx context.Context, name string) (coord.LockInfo, error) {
	info, err := c.Inspect(ctx, name)
	if err != nil {
		return info, err
	}
	if !info.Held {
		return info, fmt.Errorf("%w: %q", coord.ErrNotHeld, name)
	}
	if info.LeaseID == "" {
		return info, fmt.Errorf("%w: the holder's key on %q has no lease: it was not written by fence", coord.ErrUnavailable, name)
	}
	id, err := parseID(info.LeaseID)
	if err != nil {
		return info, err
	}
	// A lease that ended since the read (released, expired) is what the
	// caller asked for: not an error.
	if _, err := c.cli.Revoke(ctx, id); err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return info, c.mapErr(ctx, "revoke", err)
	}
	return info, nil
}

// revokeBounded revokes lease id with attempts of claimTimeout each, while
// ctx allows: an attempt that went to a member that stopped answering must
// not hold a release (and so the next holder) until that member resumes.
// A revoke sent twice finds the lease gone the second time.
func (c *Coordinator) revokeBounded(ctx context.Context, id clientv3.LeaseID) error {
	for {
		actx, cancel := context.WithTimeout(ctx, claimTimeout)
		_, err := c.cli.Revoke(actx, id)
		timedOut := actx.Err() != nil
		cancel()
		if err == nil || !timedOut || ctx.Err() != nil {
			return err
		}
	}
}
