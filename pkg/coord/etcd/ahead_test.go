package etcd_test

import (
	"errors"
	"slices"
	"strconv"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fence-dev/fence/internal/etcdtest"
	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/coord/etcd"
)

// leaseIDs returns the ids of the leases srv holds, as coord.Lease.ID
// writes them.
func leaseIDs(t *testing.T, cli *clientv3.Client) []string {
	t.Helper()
	resp, err := cli.Leases(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, l := range resp.Leases {
		ids = append(ids, strconv.FormatUint(uint64(l.ID), 16))
	}
	slices.Sort(ids)
	return ids
}

// awaitLeases returns the ids of srv's leases once there are n of them
// (New does not wait for the grant it sends ahead).
func awaitLeases(t *testing.T, cli *clientv3.Client, n int) []string {
	t.Helper()
	for end := time.Now().Add(guard); ; time.Sleep(5 * time.Millisecond) {
		ids := leaseIDs(t, cli)
		if len(ids) == n {
			return ids
		}
		if time.Now().After(end) {
			t.Fatalf("the cluster holds leases %v, want %d", ids, n)
		}
	}
}

// TestAhead: New with Config.Ahead grants the lease beside its connection
// check, and the first Acquire of that lock with that TTL holds it (no
// second lease); an Acquire of another lock or TTL grants its own, and
// Close revokes the lease no Acquire took. A New that fails (a user who
// may grant leases but not read the prefix) leaves no lease behind.
func TestAhead(t *testing.T) {
	srv := etcdtest.Start(t, etcdtest.WithAuth("rootpw"))
	root := srv.Client(t)
	for _, step := range []func() error{
		func() error { _, err := root.UserAdd(ctx(t), "other", "otherpw"); return err },
		func() error { _, err := root.RoleAdd(ctx(t), "elsewhere"); return err },
		func() error {
			_, err := root.RoleGrantPermission(ctx(t), "elsewhere", "/elsewhere/", clientv3.GetPrefixRangeEnd("/elsewhere/"), clientv3.PermissionType(clientv3.PermReadWrite))
			return err
		},
		func() error { _, err := root.UserGrantRole(ctx(t), "other", "elsewhere"); return err },
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	newC := func(user, pw string, ahead etcd.Ahead) (*etcd.Coordinator, error) {
		return etcd.New(ctx(t), etcd.Config{Endpoints: srv.Endpoints(), Username: user, Password: pw,
			DialTimeout: 5 * time.Second, Ahead: ahead})
	}
	const ttl = 20 * time.Second

	before := time.Now()
	c, err := newC("root", "rootpw", etcd.Ahead{Lock: "job", TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	granted := awaitLeases(t, root, 1)
	l := acquire(t, c, "job", coord.AcquireOptions{TTL: ttl})
	if l.ID != granted[0] {
		t.Fatalf("Acquire holds lease %s, want %s, the one granted ahead", l.ID, granted[0])
	}
	if l.Sent.Before(before) || l.TTL != ttl {
		t.Fatalf("the lease granted ahead has Sent %v (New began at %v) and TTL %v, want its grant's", l.Sent, before, l.TTL)
	}
	if ids := leaseIDs(t, root); !slices.Equal(ids, granted) {
		t.Fatalf("after the Acquire the cluster holds leases %v, want only %v", ids, granted)
	}
	release(t, c, l)
	if ids := leaseIDs(t, root); len(ids) != 0 {
		t.Fatalf("after the release the cluster holds leases %v", ids)
	}
	c.Close()

	// Another lock, and the same lock with another TTL, grant their own:
	// the lease granted ahead stays until Close revokes it.
	c, err = newC("root", "rootpw", etcd.Ahead{Lock: "job", TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	ahead := awaitLeases(t, root, 1)
	other := acquire(t, c, "other", coord.AcquireOptions{TTL: ttl})
	longer := acquire(t, c, "job", coord.AcquireOptions{TTL: 2 * ttl})
	if other.ID == ahead[0] || longer.ID == ahead[0] {
		t.Fatalf("Acquire of another lock (%s) or TTL (%s) took the lease granted ahead for job, %s", other.ID, longer.ID, ahead[0])
	}
	release(t, c, other)
	release(t, c, longer)
	// (The two released leases are kept for the next acquisitions: the
	// Coordinator has acquired twice.)
	if ids := leaseIDs(t, root); !slices.Contains(ids, ahead[0]) {
		t.Fatalf("before Close the cluster holds leases %v, without %s, the one granted ahead", ids, ahead[0])
	}
	c.Close()
	if ids := leaseIDs(t, root); len(ids) != 0 {
		t.Fatalf("Close left leases %v: the lease granted ahead is not revoked", ids)
	}

	// A failed New: its grant went through, its check did not.
	_, err = newC("other", "otherpw", etcd.Ahead{Lock: "job", TTL: ttl})
	if !errors.Is(err, coord.ErrUnavailable) {
		t.Fatalf("New as a user who may not read the prefix = %v, want ErrUnavailable", err)
	}
	if ids := leaseIDs(t, root); len(ids) != 0 {
		t.Fatalf("a failed New left leases %v", ids)
	}
}
