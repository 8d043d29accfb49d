package coord

import "errors"

var (
	// ErrStopRequested is what a lease watch (Coordinator.WatchLease) reports when the
	// holder of the lease was asked to stop its work and release the lease
	// (Coordinator.RequestStop: `fence revoke` without --force). The lease
	// is still held: the holder should stop, then release it.
	ErrStopRequested = errors.New("stop requested")
	// ErrOtherToken: the lock is held, but under another token than the one
	// named (the token arguments of RequestStop and RevokeToken). Wrapped with details.
	ErrOtherToken = errors.New("held under another token")
)
