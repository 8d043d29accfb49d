package etcd

import (
	"context"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fence-dev/fence/pkg/coord"
)

// Coordinator is the concrete coordinator New and NewFromClient return, for
// the tests of what it has beyond coord.Coordinator.
type Coordinator = coordinator

// Dial and FromClient are New and NewFromClient returning it.
var (
	Dial       = dial
	FromClient = func(ctx context.Context, cli *clientv3.Client, opts ...Option) (*coordinator, error) {
		return concrete(NewFromClient(ctx, cli, opts...))
	}
)

func dial(ctx context.Context, endpoints []string, opts ...Option) (*coordinator, error) {
	return concrete(New(ctx, endpoints, opts...))
}

func concrete(c coord.Coordinator, err error) (*coordinator, error) {
	if err != nil {
		return nil, err
	}
	return c.(*coordinator), nil
}

// LaneLastSends is when a keep-alive was last queued on each of c's lanes
// (zero: never), in the order of c's endpoints.
func LaneLastSends(c *coordinator) []time.Time {
	var ts []time.Time
	for _, l := range c.ka.lanes {
		var t time.Time
		if ns := l.lastSend.Load(); ns != 0 {
			t = time.Unix(0, ns)
		}
		ts = append(ts, t)
	}
	return ts
}
