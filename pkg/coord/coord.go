// Package coord defines fence's lease coordinator: the API that the CLI, the
// dashboard and other Go programs use to take, keep and inspect leases on
// named locks, whatever backend stands behind it.
//
// A lease is granted to one holder at a time. Every grant carries a fencing
// token, an integer strictly greater than every token issued before for the
// same lock, so that protected storage can refuse a stale holder's writes.
//
// Three backends implement Coordinator: package local (one host, no server;
// the default), package etcd (an etcd v3 cluster) and package postgres. Decorators such as
// history.Recorder implement it too, by wrapping another Coordinator.
package coord

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"time"

	"github.com/fence-dev/fence/pkg/internal/printable"
)

// WaitForever, as AcquireOptions.Wait, waits until the lease is acquired or
// the context ends.
const WaitForever time.Duration = -1

// MaxNameLen is the longest lock name, in bytes.
const MaxNameLen = 256

// MaxToken is the largest fencing token a coordinator issues: tokens fit a
// signed 64-bit integer (an SQL BIGINT or SQLite INTEGER column, an etcd
// revision). A lock whose counter has reached it refuses new leases with an
// error wrapping ErrUnavailable; a token never wraps.
const MaxToken = math.MaxInt64

// AcquireOptions says how to take a lease. Every backend checks them with
// the same rules, so that all refuse the same input: a bad name
// (ValidateName), a TTL that is negative or above 7 days, a negative Wait
// other than WaitForever, a bad holder (ValidateHolder), a Process with a
// PID that is not positive or a process group that is negative or init's,
// and Slots outside 0..MaxSlots, each with an error wrapping ErrInvalid.
//
// The zero AcquireOptions is a try-lock: a lease of 15s for
// DefaultHolder() when the lock is free, else ErrBusy at once. To wait as
// etcd's concurrency.Mutex.Lock does, set Wait to WaitForever (the wait
// then ends with ctx). The zero Wait stays "do not wait" because that is
// what every caller that sets Wait: 0 means, fence's own included.
type AcquireOptions struct {
	// TTL is the requested time to live, 0 for 15s. A backend may
	// grant more (etcd rounds up to whole seconds and has a minimum);
	// Lease.TTL is what it granted.
	TTL time.Duration
	// Holder names the holder (default DefaultHolder(): "HOSTNAME:PID");
	// see ValidateHolder.
	Holder string
	// Wait is how long to wait for a held lock: 0 fails at once with
	// ErrBusy, WaitForever waits until acquired (or ctx ends); any other
	// negative value is refused.
	Wait time.Duration
	// Process, when set, attaches the lease to running processes (as fence
	// run does): the local backend may then hand the lock over before the
	// TTL runs out once all of them are gone. It also says that the lease
	// has a supervisor that watches it (WatchLease) and answers stop
	// requests: Coordinator.RequestStop asks it rather than leaving the
	// lease to be ended at once. etcd records only that. Checked by every
	// backend.
	Process *ProcessInfo
	// OnWait, when set, is called once if the lock is held when the request
	// arrives, with the current holder, after the caller has taken its place
	// in the queue and before it waits (fence run prints "waiting for HOLDER
	// (token N)"). A waiter that arrives later queues behind this one.
	OnWait func(current LockInfo)
	// Slots, when above 1 (at most MaxSlots), makes the lock a semaphore:
	// up to Slots holders at once (see LockInfo.Holders), each in a slot
	// (0..Slots-1, the lowest free one at its grant) and each with its own
	// fencing token (tokens are per lock, never per slot); 0 and 1 are a
	// lock. The lock records Slots while it has holders or waiters: an
	// Acquire with another number fails with an error wrapping ErrInvalid
	// and does not queue; an idle lock takes its next caller's. An
	// operator limit (SetLimit) caps the holders below Slots.
	Slots int
}

// ProcessInfo identifies the processes that keep a lease alive on this host.
type ProcessInfo struct {
	// PIDs are the supervising processes (fence and its watchdog).
	PIDs []int `json:"pids,omitempty"`
	// PGID is the command's process group, 0 until known.
	PGID int `json:"pgid,omitempty"`
}

// Lease is a granted lease.
type Lease struct {
	Name   string        // lock name
	Holder string        // holder identity
	Token  uint64        // fencing token
	ID     string        // lease id, for Renew and Release
	TTL    time.Duration // granted TTL
	// AcquiredAt is the wall-clock time of the grant, for display.
	AcquiredAt time.Time
	// Sent is the local monotonic time at which the request that granted the
	// lease, or last extended it, was sent. The lease is certainly alive on
	// the coordinator until Sent+TTL (the coordinator starts counting no
	// earlier than it received the request). It may precede the Acquire
	// call, by less than TTL/3.
	Sent time.Time
	// Slot is the holder's slot of a semaphore (AcquireOptions.Slots), 0
	// for a lock.
	Slot int
}

// Renewal is an acknowledged renewal.
type Renewal struct {
	// Sent is the local monotonic time at which the acknowledged request was
	// sent: the lease is alive until Sent+TTL.
	Sent time.Time
	// TTL is the TTL the coordinator granted for this renewal.
	TTL time.Duration
}

// LockInfo describes one lock as a reader sees it.
type LockInfo struct {
	Name string `json:"name"`
	// Held is false for a free lock; the holder fields are then empty.
	Held       bool          `json:"held"`
	Holder     string        `json:"holder,omitempty"`
	Token      uint64        `json:"token,omitempty"`
	LeaseID    string        `json:"lease_id,omitempty"`
	TTL        time.Duration `json:"-"` // granted TTL
	TTLLeft    time.Duration `json:"-"` // time left before expiry, as of the read
	AcquiredAt time.Time     `json:"acquired_at,omitempty"`
	// Waiters counts processes queued for the lock (where known).
	Waiters int `json:"waiters"`
	// Queue is who waits, in the order they will be served (the first
	// will hold next), where the backend knows them: len(Queue) ==
	// Waiters then. Inspect, List and Watch fill it on both backends.
	Queue []Waiter `json:"queue,omitempty"`
	// LastToken is the largest token ever issued for the lock (0 if none).
	LastToken uint64 `json:"last_token,omitempty"`
	// Process is set for a local lease attached to processes.
	Process *ProcessInfo `json:"process,omitempty"`
	// Limit is the operator limit that binds the lock (see Limit), nil
	// when none covers it.
	Limit *Limit `json:"limit,omitempty"`
	// Slots is the lock's number of slots when it is a semaphore (above 1;
	// 0 for a lock), and Holders its holders, oldest first (the top-level
	// holder fields describe the first). Both are empty for a lock.
	Slots   int          `json:"slots,omitempty"`
	Holders []HolderInfo `json:"holders,omitempty"`
}

// Waiter is one member of a lock's queue.
type Waiter struct {
	// Holder is the identity the waiter asked to hold the lock as
	// (AcquireOptions.Holder).
	Holder string `json:"holder"`
	// Since is when it joined the queue (zero where not known: a waiter of
	// a fence that did not record it).
	Since time.Time `json:"since,omitempty"`
	// LeaseID is the waiter's own lease where it has one while it waits
	// (etcd), else empty.
	LeaseID string `json:"lease_id,omitempty"`
	// PID is the waiting process where the backend knows it (local).
	PID int `json:"pid,omitempty"`
}

// HeldFor is how long the current holder has held the lock, as of now.
func (i LockInfo) HeldFor(now time.Time) time.Duration {
	if !i.Held || i.AcquiredAt.IsZero() {
		return 0
	}
	return max(now.Sub(i.AcquiredAt), 0)
}

// EventType says what changed in a watch.
type EventType string

const (
	EventAcquired EventType = "acquired" // a new holder
	EventRenewed  EventType = "renewed"  // the holder renewed (local only; etcd renewals are not visible)
	EventReleased EventType = "released" // the lock became free (release, revoke or expiry)
	EventWaiters  EventType = "waiters"  // the queue changed
	// EventLimit: the operator limit that binds the lock changed (fence
	// limit, freeze, thaw; Info.Limit is the new one, nil after a thaw).
	// Every event's Info carries the lock's limit.
	EventLimit EventType = "limit"
	// EventReset means the watch lost track (e.g. etcd compaction); the
	// consumer should List again. Info is empty.
	EventReset EventType = "reset"
)

// Event is one change seen by Watch: the lock's state after the change.
type Event struct {
	Type EventType
	Info LockInfo
}

// Coordinator is a lease coordinator: the contract every backend meets
// (the conformance suite in package coordtest checks it). Implementations are safe for concurrent use
// by many goroutines and, for local, many processes.
//
// Every method that takes a lock name refuses a bad one with an error
// wrapping ErrInvalid (ValidateName) before it reaches the coordinator; a
// coordinator that cannot be reached, or whose state cannot be read safely,
// returns an error wrapping ErrUnavailable and never guesses. Methods that
// take a ctx return ctx.Err() (or an error wrapping it) when ctx ends
// first, and leave nothing half done that the contract below does not
// allow. Fencing tokens of a lock are strictly increasing across holders,
// restarts and failures, and never above MaxToken.
type Coordinator interface {
	// Acquire takes a lease on name, checking opts first (AcquireOptions).
	// It returns ErrBusy (saying so when an operator limit held it
	// back; an error wrapping ErrInvalid when opts.Slots differ from
	// the lock's) when the lock was not acquired within opts.Wait, and
	// ctx.Err() when ctx ended first; in both cases it holds nothing and has
	// left the queue. Waiters are served first come, first served. The
	// lease's token is strictly greater than every token the lock issued
	// before; Lease.Sent is a monotonic time no later than the sending of
	// the request that granted it.
	Acquire(ctx context.Context, name string, opts AcquireOptions) (*Lease, error)
	// Renew extends the lease identified by (name, leaseID) by its TTL. It
	// returns ErrLeaseLost when the lease no longer exists (expired, revoked
	// or released), and then never extends it.
	Renew(ctx context.Context, name, leaseID string) (Renewal, error)
	// Release ends the lease. Releasing a lease that is already gone is not an
	// error. Once it returns nil the next waiter may be granted the lock.
	Release(ctx context.Context, name, leaseID string) error
	// AttachProcess attaches the live lease (name, leaseID) to processes of
	// this host (fence run records its command's process group once the
	// command has started): PIDs, when given, replace the supervising
	// processes; PGID, when not 0, sets the command's process group. A
	// backend that watches processes (local) may then hand the lock over
	// before the TTL once they are all gone, and returns ErrLeaseLost when
	// the lease is not live; one that does not (etcd) checks p and records
	// nothing.
	AttachProcess(ctx context.Context, name, leaseID string, p ProcessInfo) error

	// Inspect returns the state of one lock (Held false when free), with
	// its queue, its last token and the limit that binds it.
	Inspect(ctx context.Context, name string) (LockInfo, error)
	// List returns every lock whose name starts with prefix, sorted by name:
	// held locks, locks with waiters, locks with a limit of their own (see
	// a limit of its own), and, where the backend remembers them (local), free
	// locks with a token history (Held false).
	List(ctx context.Context, prefix string) ([]LockInfo, error)
	// Watch sends the state of each lock under prefix whenever it changes,
	// until ctx ends; then the channel is closed. EventReset says the watch
	// lost track and the consumer should List again.
	Watch(ctx context.Context, prefix string) (<-chan Event, error)
	// WatchLease follows the hold of lease leaseID on lock name until ctx
	// ends. The channel receives one error, wrapping ErrLeaseLost, when the
	// hold has certainly ended (the lease was revoked or expired, or its key
	// on the lock was deleted), or wrapping ErrStopRequested, when the
	// holder was asked to stop and release (RequestStop, also one made
	// before the watch started; the lease is still held then), and is then
	// closed. It is closed without a value when the watch ends otherwise:
	// ctx ended, the coordinator was closed, or the watch lost track and
	// could not tell for certain. A failed, cancelled or interrupted watch
	// is never reported as a loss: renewals remain the way to find out then.
	// The caller's own Release ends the hold too, and is reported like any
	// other end: cancel ctx before releasing. The error is returned for bad
	// input (wrapping ErrInvalid) or a closed coordinator; WatchLease does
	// not wait for the coordinator.
	WatchLease(ctx context.Context, name, leaseID string) (<-chan error, error)

	// Revoke ends the current holder's lease, whoever holds it, and returns
	// what it ended. It returns ErrNotHeld when the lock is free, and an
	// error wrapping ErrInvalid, listing their tokens, when several hold it.
	Revoke(ctx context.Context, name string) (LockInfo, error)
	// RequestStop asks the supervisor of the lease on lock name (fence run)
	// to stop its command and release, through its WatchLease
	// (ErrStopRequested). token 0 means whoever holds the lock, any other
	// value only the holder with that token (ErrOtherToken, with the
	// holder's LockInfo, when another holds it); a free lock is ErrNotHeld.
	// The ask names the holder's token, so it never reaches a later holder;
	// asking twice is harmless. asked is false, and nothing is written, when
	// the lease has no supervisor to answer (acquired without
	// AcquireOptions.Process; on local also when its processes are gone):
	// end it with RevokeToken.
	RequestStop(ctx context.Context, name string, token uint64) (info LockInfo, asked bool, err error)
	// WaitEnded waits until the hold of lock name under token (not 0) has
	// ended (released, revoked, expired, or, on local, its processes gone)
	// and returns nil; when ctx ends first, ctx's error.
	WaitEnded(ctx context.Context, name string, token uint64) error
	// RevokeToken is Revoke limited to the holder with token (0: whoever
	// holds the lock), with RequestStop's errors.
	RevokeToken(ctx context.Context, name string, token uint64) (LockInfo, error)

	// SetLimit records the operator limit l (checked with ValidateLimit),
	// replacing the limit of the same scope (Name and Prefix). It is checked
	// atomically with every grant: once SetLimit has returned, no grant
	// exceeds it, and waiters held back by the limit it replaced have been
	// woken. Holders above it keep their leases.
	SetLimit(ctx context.Context, l Limit) error
	// ClearLimit removes the limit of the scope (name, prefix) and returns
	// it; ok is false when there was none. Waiters it held back are woken.
	ClearLimit(ctx context.Context, name string, prefix bool) (l Limit, ok bool, err error)
	// Limits returns every limit in force, sorted by scope (lock limits
	// first, then prefixes, each by name).
	Limits(ctx context.Context) ([]Limit, error)

	// Completion returns the completion record of (lock, key) (fence run
	// --once); ok is false when there is none (never written, forgotten or
	// expired).
	Completion(ctx context.Context, lock, key string) (rec Completion, ok bool, err error)
	// Complete records that the job rec.Key of lock rec.Lock succeeded under
	// the lease leaseID, keeping the record for keep (DefaultKeep when 0),
	// atomically with the check that the lease still holds the lock: it
	// writes nothing and returns an error wrapping ErrLeaseLost when it does
	// not. A record already there (marked by hand meanwhile) is kept as it
	// is, and Complete returns nil.
	Complete(ctx context.Context, leaseID string, rec Completion, keep time.Duration) error
	// Mark writes rec without a lease (an operator's `fence once mark`),
	// replacing any record of its key.
	Mark(ctx context.Context, rec Completion, keep time.Duration) error
	// Forget removes the record of (lock, key); removed is false when there
	// was none.
	Forget(ctx context.Context, lock, key string) (removed bool, err error)
	// Completions returns the unexpired records of lock, sorted by key.
	Completions(ctx context.Context, lock string) ([]Completion, error)

	// Describe says where the coordinator is, for messages and the
	// dashboard: "local /var/lib/fence", "etcd 127.0.0.1:2379".
	Describe() string
	// Close releases the coordinator's resources (not the leases); the
	// lease watches it started are closed.
	Close() error
}

var (
	// ErrBusy: the lock was not acquired in time.
	ErrBusy = errors.New("busy")
	// ErrLeaseLost: the lease is gone (expired, revoked, released).
	ErrLeaseLost = errors.New("lease lost")
	// ErrNotHeld: the lock is free.
	ErrNotHeld = errors.New("lock is not held")
	// ErrInvalid: bad input (a name, a TTL). Wrapped with details.
	ErrInvalid = errors.New("invalid argument")
	// ErrUnavailable: the coordinator cannot be reached or its state cannot
	// be read safely (corrupt state fails closed with this). Wrapped.
	ErrUnavailable = errors.New("coordinator unavailable")
	// ErrStopRequested is what a lease watch (Coordinator.WatchLease) reports when the
	// holder of the lease was asked to stop its work and release the lease
	// (Coordinator.RequestStop: `fence revoke` without --force). The lease
	// is still held: the holder should stop, then release it.
	ErrStopRequested = errors.New("stop requested")
	// ErrOtherToken: the lock is held, but under another token than the one
	// named (the token arguments of RequestStop and RevokeToken). Wrapped with details.
	ErrOtherToken = errors.New("held under another token")
	// ErrCompleted: the job already ran to success for its key (a completion
	// record exists). It is the expected outcome of a `fence run --once` that
	// another host got to first, not a failure.
	ErrCompleted = errors.New("already completed")
)

// ValidateName checks a lock name: 1 to MaxNameLen bytes of printable
// UTF-8. Refused, besides invalid UTF-8: control characters, invisible
// format characters (Unicode category Cf: bidirectional overrides,
// zero-width spaces and joiners), the other characters drawn as nothing
// (Hangul fillers, variation selectors), private-use characters and
// unassigned code points: a name reads as what
// it is, on a terminal and on the dashboard. `/` is allowed and has no
// nesting meaning. The error wraps ErrInvalid.
func ValidateName(name string) error {
	return invalid(printable.Check("lock name", name, MaxNameLen))
}

// maxHolderLen is the longest holder identity, in bytes.
const maxHolderLen = 1024

// ValidateHolder checks a holder identity (AcquireOptions.Holder) by the
// rules of lock names, up to 1024 bytes; "" is allowed (the
// default). The error wraps ErrInvalid.
func ValidateHolder(holder string) error {
	if holder == "" {
		return nil
	}
	return invalid(printable.Check("holder", holder, maxHolderLen))
}

// invalid wraps err, if any, in ErrInvalid.
func invalid(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%w: %v", ErrInvalid, err)
}

// ValidateTTL checks a TTL: positive and at most 7 days.
func ValidateTTL(ttl time.Duration) error {
	if ttl <= 0 {
		return fmt.Errorf("%w: TTL must be positive, got %v", ErrInvalid, ttl)
	}
	if ttl > maxTTL {
		return fmt.Errorf("%w: TTL %v exceeds the maximum %v", ErrInvalid, ttl, maxTTL)
	}
	return nil
}

// maxTTL is the longest TTL a lease may have.
const maxTTL = 7 * 24 * time.Hour

// DefaultHolder is the holder identity used when none is given:
// "HOSTNAME:PID".
func DefaultHolder() string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		h = "localhost"
	}
	return fmt.Sprintf("%s:%d", h, os.Getpid())
}
