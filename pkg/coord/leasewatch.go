package coord

import "context"

// LeaseWatcher is implemented by coordinators that can tell at once when a
// lease's hold on its lock has ended, or when its holder was asked to stop
// (etcd: a watch on the lease's key; local: inotify on the lock's lock file,
// which Revoke and StopRequester.RequestStop write to), rather than at its
// next renewal. fence run uses it to stop its command as soon as `fence
// revoke` asks it to, or ends its lease.
type LeaseWatcher interface {
	// WatchLease follows the hold of lease leaseID on lock name until ctx
	// ends. The channel receives one error, wrapping ErrLeaseLost, when the
	// hold has certainly ended (the lease was revoked or expired, or its key
	// on the lock was deleted), or wrapping ErrStopRequested, when the
	// holder was asked to stop and release (StopRequester; the lease is
	// still held then), and is then closed. It is closed without a
	// value when the watch ends otherwise: ctx ended, the coordinator was
	// closed, or the watch lost track and could not tell for certain. A
	// failed, cancelled or interrupted watch is never reported as a loss:
	// renewals remain the way to find out then.
	//
	// The caller's own Release ends the hold too, and is reported like any
	// other end: cancel ctx before releasing.
	//
	// The error is returned for bad input (wrapping ErrInvalid) or a closed
	// coordinator; WatchLease does not wait for the coordinator.
	WatchLease(ctx context.Context, name, leaseID string) (<-chan error, error)
}
