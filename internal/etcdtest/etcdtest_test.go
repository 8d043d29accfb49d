package etcdtest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fence-dev/fence/internal/etcdtest"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return c
}

func TestRestartKeepsRevisions(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := srv.Client(t)
	put, err := cli.Put(ctx(t), "k", "v")
	if err != nil {
		t.Fatal(err)
	}
	srv.Restart(t)
	// The same client reconnects: the endpoints did not change.
	get, err := cli.Get(ctx(t), "k")
	if err != nil {
		t.Fatal(err)
	}
	if len(get.Kvs) != 1 || get.Kvs[0].CreateRevision != put.Header.Revision {
		t.Fatalf("after restart: %v, want create revision %d", get.Kvs, put.Header.Revision)
	}
	put2, err := cli.Put(ctx(t), "k2", "v")
	if err != nil {
		t.Fatal(err)
	}
	if put2.Header.Revision <= put.Header.Revision {
		t.Fatalf("revision went from %d to %d across restart", put.Header.Revision, put2.Header.Revision)
	}
}

func TestTLSRequiresClientCert(t *testing.T) {
	srv := etcdtest.Start(t, etcdtest.WithTLS())
	ca, cert, key := srv.TLS()
	if ca == "" || cert == "" || key == "" {
		t.Fatal("TLS files missing")
	}
	if _, err := srv.Client(t).Put(ctx(t), "k", "v"); err != nil {
		t.Fatal(err)
	}
	// Without a client certificate the server refuses the connection.
	tc := srv.ClientTLSConfig(t)
	tc.Certificates = nil
	c, err := clientv3.New(clientv3.Config{Endpoints: srv.Endpoints(), TLS: tc, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	short, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if _, err := c.Get(short, "k"); err == nil {
		t.Fatal("Get without a client certificate succeeded")
	}
}

func TestAuth(t *testing.T) {
	srv := etcdtest.Start(t, etcdtest.WithAuth("s3cret"))
	if _, err := srv.Client(t).Put(ctx(t), "k", "v"); err != nil {
		t.Fatal(err)
	}
	c, err := clientv3.New(clientv3.Config{Endpoints: srv.Endpoints(), Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Get(ctx(t), "k"); !errors.Is(err, rpctypes.ErrUserEmpty) {
		t.Fatalf("anonymous Get: %v, want %v", err, rpctypes.ErrUserEmpty)
	}
}

func TestTLSWithAuth(t *testing.T) {
	srv := etcdtest.Start(t, etcdtest.WithTLS(), etcdtest.WithAuth("pw"))
	cli := srv.Client(t)
	if _, err := cli.Put(ctx(t), "k", "v"); err != nil {
		t.Fatal(err)
	}
	srv.Restart(t)
	// Users and the root login survive the restart.
	if _, err := srv.Client(t).Get(ctx(t), "k"); err != nil {
		t.Fatal(err)
	}
}
