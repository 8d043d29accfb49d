package etcd

import (
	"context"
	"sync"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// MemberVersion is the server version one endpoint reported.
type MemberVersion struct {
	Endpoint string
	Version  string // empty when Err is set
	Err      error
}

// ServerVersions asks every endpoint's member for its version, at once,
// over the connections the coordinator has (one per member with several
// endpoints).
func (c *coordinator) ServerVersions(ctx context.Context) []MemberVersion {
	eps := c.cli.Endpoints()
	out := make([]MemberVersion, len(eps))
	var wg sync.WaitGroup
	for i, ep := range eps {
		out[i].Endpoint = ep
		wg.Go(func() {
			cli := c.cli
			if c.ka.multi() {
				var err error
				if cli, err = c.ka.lanes[i].client(); err != nil {
					out[i].Err = err
					return
				}
			}
			st, err := pb.NewMaintenanceClient(cli.ActiveConnection()).Status(ctx, &pb.StatusRequest{})
			if err != nil {
				out[i].Err = c.mapErr(ctx, "status", err)
				return
			}
			out[i].Version = st.Version
		})
	}
	wg.Wait()
	return out
}
