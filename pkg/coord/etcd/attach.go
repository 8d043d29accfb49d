package etcd

import (
	"context"

	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/internal/coordkit"
)

// AttachProcess implements coord.Coordinator. etcd does not watch the
// processes of a host: it checks its arguments and records nothing (a
// lease acquired with AcquireOptions.Process is on record as supervised).
func (c *coordinator) AttachProcess(ctx context.Context, name, leaseID string, p coord.ProcessInfo) error {
	if err := coord.ValidateName(name); err != nil {
		return err
	}
	return coordkit.ValidateProcess(p)
}
