package etcd

import (
	"context"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fence-dev/fence/internal/etcdtest"
	"github.com/fence-dev/fence/internal/faultproxy"
)

// TestHeldBackStepsBounded: the steps of a waiter held back by a limit
// are bounded as its other claim steps are: on
// a path that went silent (a frozen member), the limits watch gives up
// within about two watchChecks, so that the waiter reads again and watches
// again on a new stream, instead of waiting for that member for ever.
// (the held-back mark's attempts are bounded too; with one path there is nowhere
// else to send them, and with several the hedge already sends them again,
// so no test here can tell.)
func TestHeldBackStepsBounded(t *testing.T) {
	srv := etcdtest.Start(t)
	px, err := faultproxy.New(strings.TrimPrefix(srv.Endpoints()[0], "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { px.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := dial(ctx, []string{"http://" + px.Addr()}, WithPrefix("/hb/"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	g, err := c.cli.Grant(ctx, 30)
	if err != nil {
		t.Fatal(err)
	}
	key := c.leaseKey("hb", g.ID)
	put, err := c.cli.Put(ctx, key, meta{Holder: "w"}.encode(), clientv3.WithLease(g.ID))
	if err != nil {
		t.Fatal(err)
	}
	rev := put.Header.Revision

	px.SetMode(faultproxy.BlackholeBoth)
	wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
	start := time.Now()
	err = c.watchChange(wctx, watchSpec{rng: c.limitsRange()}, rev+1, nil)
	took := time.Since(start)
	wcancel()
	if err != nil || took > 3*watchCheck+time.Second {
		t.Fatalf("the limits watch on a silent path returned %v after %v; want nil within about %v (read again, watch again elsewhere)",
			err, took.Round(time.Millisecond), 2*watchCheck)
	}
	t.Logf("the limits watch on a silent path gave up after %v", took.Round(time.Millisecond))
}
