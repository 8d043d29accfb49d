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
