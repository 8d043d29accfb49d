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
// coordinator's shared stream (see keeper); the Renewal reports the
// request's send time and the TTL granted. A lease id given with the wrong
// lock name is not renewed: unless this coordinator put the lease's key on
// lock name itself, a linearizable read checks that the key is there first
// (see ownsKey: ErrInvalid when the lease lives on another lock; leases says
// why one read is enough).
func (c *coordinator) Renew(ctx context.Context, name, leaseID string) (coord.Renewal, error) {
	id, err := c.leaseOn(ctx, name, leaseID, "renew")
	if err != nil {
		return coord.Renewal{}, err
	}
	ttl, sent, err := c.ka.renew(ctx, id)
	switch {
	case err != nil:
		return coord.Renewal{}, c.mapErr(ctx, "renew", err)
	case ttl <= 0:
		c.leases.forget(id)
		return coord.Renewal{}, fmt.Errorf("%w: lease %s on %q has ended", coord.ErrLeaseLost, leaseID, name)
	}
	return coord.Renewal{Sent: sent, TTL: time.Duration(ttl) * time.Second}, nil
}

// leaseOn checks the arguments of an operation on lease leaseID of lock
// name and, unless this coordinator put the lease's key on the lock itself,
// that the key is there (ownsKey).
func (c *coordinator) leaseOn(ctx context.Context, name, leaseID, op string) (clientv3.LeaseID, error) {
	id, err := c.checkLease(name, leaseID)
	if err != nil {
		return 0, err
	}
	if _, ok := c.leases.owned(name, id); ok {
		return id, nil
	}
	return id, c.ownsKey(ctx, name, id, op)
}

// checkLease checks the arguments of an operation on lease leaseID of lock
// name, and fails it on a closed coordinator.
func (c *coordinator) checkLease(name, leaseID string) (clientv3.LeaseID, error) {
	if err := coord.ValidateName(name); err != nil {
		return 0, err
	}
	id, err := parseID(leaseID)
	if err != nil {
		return 0, err
	}
	return id, c.check()
}

// ownsKey checks that lease id has its key on lock name. When it has not,
// the lease's keys tell why: a lease that lives with a key on another lock
// is bad input (ErrInvalid, naming that lock); one that is gone, or holds
// no lock any more, is ErrLeaseLost.
func (c *coordinator) ownsKey(ctx context.Context, name string, id clientv3.LeaseID, op string) error {
	resp, err := c.cli.Get(ctx, c.leaseKey(name, id), clientv3.WithCountOnly())
	if err != nil {
		return c.mapErr(ctx, op, err)
	}
	if resp.Count > 0 {
		return nil
	}
	ttl, err := c.cli.TimeToLive(ctx, id, clientv3.WithAttachedKeys())
	if err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return c.mapErr(ctx, op, err)
	}
	if err == nil && ttl.TTL > 0 {
		for _, k := range ttl.Keys {
			if other, ok := c.parseKey(string(k)); ok && other != name {
				return fmt.Errorf("%w: lease %s belongs to lock %q, not to %q", coord.ErrInvalid, formatID(id), other, name)
			}
		}
	}
	return fmt.Errorf("%w: lease %s holds no place on %q", coord.ErrLeaseLost, formatID(id), name)
}

// Release revokes the lease, which removes its key (a coordinator that
// acquires in a loop deletes the key and keeps the lease: see leases). A
// lease that is gone is left alone and is not an error; one that lives on
// another lock is left alone too, with ErrInvalid (a lease this coordinator
// did not put on lock name itself is read first: see ownsKey).
func (c *coordinator) Release(ctx context.Context, name, leaseID string) error {
	id, err := c.leaseOn(ctx, name, leaseID, "release")
	if errors.Is(err, coord.ErrLeaseLost) {
		return nil
	}
	if err != nil {
		return err
	}
	if err := c.revokeBounded(ctx, id); err != nil {
		return c.mapErr(ctx, "release", err)
	}
	c.leases.forget(id)
	return nil
}

// Revoke ends the lease of the current holder of name, whoever holds it,
// and returns the holder it ended. The first waiter then holds the lock.
func (c *coordinator) Revoke(ctx context.Context, name string) (coord.LockInfo, error) {
	return c.RevokeToken(ctx, name, 0)
}

// revokeBounded revokes lease id with attempts of claimTimeout each, while
// ctx allows: an attempt that went to a member that stopped answering must
// not hold a release (and so the next holder) until that member resumes.
// A revoke sent twice finds the lease gone the second time: a lease that
// is gone is not an error.
func (c *coordinator) revokeBounded(ctx context.Context, id clientv3.LeaseID) error {
	for {
		actx, cancel := context.WithTimeout(ctx, claimTimeout)
		_, err := c.cli.Revoke(actx, id)
		timedOut := actx.Err() != nil
		cancel()
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			return nil
		}
		if err == nil || !timedOut || ctx.Err() != nil {
			return err
		}
	}
}
