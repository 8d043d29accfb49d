package etcdproc

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

func TestFreezeStopsAnswers(t *testing.T) {
	s := Start(t)
	c, err := clientv3.New(clientv3.Config{Endpoints: s.Endpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := c.Put(ctx, "k", "v"); err != nil {
		t.Fatal(err)
	}
	if err := s.Freeze(); err != nil {
		t.Fatal(err)
	}
	fctx, fcancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	_, err = c.Get(fctx, "k")
	fcancel()
	if err == nil {
		t.Fatal("a frozen etcd answered")
	}
	s.Thaw()
	if _, err := c.Get(ctx, "k"); err != nil {
		t.Fatalf("after thaw: %v", err)
	}
}

// TestClusterPartition: a three-member cluster of separate processes
// elects a new leader when its leader is cut off from its peers through the
// proxies, and the old leader rejoins once healed.
func TestClusterPartition(t *testing.T) {
	c := StartCluster(t, ClusterOptions{})
	old := c.Leader()
	if old == nil {
		t.Fatal("no leader")
	}
	old.Partition(true)
	var leader *Member
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		for _, m := range c.Members {
			if m == old {
				continue
			}
			if st, err := m.status(500 * time.Millisecond); err == nil && st.Leader == st.Header.MemberId {
				leader = m
			}
		}
		if leader != nil {
			break
		}
	}
	if leader == nil {
		t.Fatalf("no new leader with %s cut off", old.Name)
	}
	old.Partition(false)
	if err := c.WaitHealthy(10 * time.Second); err != nil {
		t.Fatal(err)
	}
}
