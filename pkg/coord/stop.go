package coord

import (
	"context"
	"errors"
)

var (
	// ErrStopRequested is what a lease watch (LeaseWatcher) reports when the
	// holder of the lease was asked to stop its work and release the lease
	// (StopRequester.RequestStop: `fence revoke` without --force). The lease
	// is still held: the holder should stop, then release it.
	ErrStopRequested = errors.New("stop requested")
	// ErrOtherToken: the lock is held, but under another token than the one
	// named (StopRequester's token arguments). Wrapped with details.
	ErrOtherToken = errors.New("held under another token")
)

// StopRequester is implemented by coordinators that can ask the supervisor
// of a lease (`fence run`) to stop its command and release the lease, and
// tell it at once through its LeaseWatcher. `fence revoke` asks first and
// ends the lease only when the holder has not released it in time, so that
// the next holder never starts beside the old holder's command.
//
// The methods take the holder's token: 0 means whoever holds the lock, any
// other value only the holder with that token (ErrOtherToken, with the
// holder's LockInfo, when another holds it). A free lock is ErrNotHeld.
type StopRequester interface {
	// RequestStop asks the holder of lock name to stop and release. The ask
	// names the holder's token, so it never reaches a later holder; asking
	// twice is harmless. asked is false, and nothing is written, when the
	// lease has no supervisor to answer (it was acquired without
	// AcquireOptions.Process, as `fence acquire` does; on the local backend
	// also when its supervising processes are gone): end it with
	// RevokeToken.
	//
	// The holder's LeaseWatcher reports the ask with an error wrapping
	// ErrStopRequested, also when the watch starts after the ask.
	RequestStop(ctx context.Context, name string, token uint64) (info LockInfo, asked bool, err error)
	// WaitEnded waits until the hold of lock name under token has ended
	// (released, revoked, expired, or, on the local backend, its processes
	// gone) and returns nil; when it ends first, ctx's error. token must
	// not be 0.
	WaitEnded(ctx context.Context, name string, token uint64) error
	// RevokeToken is Revoke limited to the holder with token (0: whoever
	// holds the lock).
	RevokeToken(ctx context.Context, name string, token uint64) (LockInfo, error)
}
