package etcd_test

import (
	"testing"

	"github.com/fence-dev/fence/internal/etcdtest"
	"github.com/fence-dev/fence/pkg/coord"
)

// TestAcquiredAtAfterGrant: a lease is acquired no earlier than its grant
// was sent (acquired_at is recorded with the put that takes the lock), for
// a lock and a semaphore taken at once.
func TestAcquiredAtAfterGrant(t *testing.T) {
	t.Parallel()
	c := open(t, etcdtest.Start(t), "/acquired-at/")
	for _, slots := range []int{1, 2} {
		l := acquire(t, c, "at", coord.AcquireOptions{Slots: slots})
		if l.AcquiredAt.Before(l.Sent) {
			t.Errorf("slots %d: acquired at %v, before its grant was sent (%v)", slots, l.AcquiredAt, l.Sent)
		}
		if err := c.Release(ctx(t), l.Name, l.ID); err != nil {
			t.Fatal(err)
		}
	}
}
