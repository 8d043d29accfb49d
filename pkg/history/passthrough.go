package history

import (
	"context"
	"time"

	"github.com/fence-dev/fence/pkg/coord"
)

// The operations a Recorder passes to the coordinator it wraps unchanged:
// they record nothing (the operator limits are recorded by their callers,
// as Frozen, Limited and Thawed).

// AttachProcess implements coord.Coordinator.
func (r *recorder) AttachProcess(ctx context.Context, name, leaseID string, p coord.ProcessInfo) error {
	return r.inner.AttachProcess(ctx, name, leaseID, p)
}

// WatchLease implements coord.Coordinator.
func (r *recorder) WatchLease(ctx context.Context, name, leaseID string) (<-chan error, error) {
	return r.inner.WatchLease(ctx, name, leaseID)
}

// SetLimit implements coord.Coordinator.
func (r *recorder) SetLimit(ctx context.Context, l coord.Limit) error {
	return r.inner.SetLimit(ctx, l)
}

// ClearLimit implements coord.Coordinator.
func (r *recorder) ClearLimit(ctx context.Context, name string, prefix bool) (coord.Limit, bool, error) {
	return r.inner.ClearLimit(ctx, name, prefix)
}

// Limits implements coord.Coordinator.
func (r *recorder) Limits(ctx context.Context) ([]coord.Limit, error) { return r.inner.Limits(ctx) }

// Completion implements coord.Coordinator.
func (r *recorder) Completion(ctx context.Context, lock, key string) (coord.Completion, bool, error) {
	return r.inner.Completion(ctx, lock, key)
}

// Complete implements coord.Coordinator.
func (r *recorder) Complete(ctx context.Context, leaseID string, rec coord.Completion, keep time.Duration) error {
	return r.inner.Complete(ctx, leaseID, rec, keep)
}

// Mark implements coord.Coordinator.
func (r *recorder) Mark(ctx context.Context, rec coord.Completion, keep time.Duration) error {
	return r.inner.Mark(ctx, rec, keep)
}

// Forget implements coord.Coordinator.
func (r *recorder) Forget(ctx context.Context, lock, key string) (bool, error) {
	return r.inner.Forget(ctx, lock, key)
}

// Completions implements coord.Coordinator.
func (r *recorder) Completions(ctx context.Context, lock string) ([]coord.Completion, error) {
	return r.inner.Completions(ctx, lock)
}
