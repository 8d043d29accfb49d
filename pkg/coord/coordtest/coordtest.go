// Package coordtest is the conformance suite that every coord.Coordinator
// backend must pass, unchanged: mutual exclusion, fencing tokens that only go
// up (across holders, releases, expiry, revocation and restarts), FIFO
// waiting, the three wait modes, expiry and takeover, renewal, idempotent
// release, lease ids (malformed, or of another lock), revocation, inspection, listing, watching, name validation and
// context cancellation. Backends with more promises (the local backend's
// process-attached leases and fail-closed state files) opt into the cases for
// them through the Harness.
//
// A backend's test calls Run with a Harness that opens clients of one
// coordinator:
//
//	func TestConformance(t *testing.T) {
//		t.Run("mine", func(t *testing.T) {
//			coordtest.Run(t, coordtest.Harness{New: ..., ShortTTL: time.Second})
//		})
//	}
//
// Cases that need separate processes re-execute the test binary in helper
// mode (see HelperCommand and HelperMain); the test binary's TestMain must
// dispatch to HelperMain when IsHelper reports true.
//
// The suite asserts safety and ordering, never speed: every time bound in it
// is either a lower bound that a correct backend cannot break (no takeover
// before the TTL) or a generous hang guard.
package coordtest

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fence-dev/fence/pkg/coord"
)

// Harness describes the coordinator under test.
type Harness struct {
	// New opens a new client of the coordinator under test, independent of
	// every other client as if it ran in another process. All clients see
	// the same locks. The suite closes the clients it opens.
	New func(t testing.TB) coord.Coordinator

	// Restart stops the coordinator and starts it again on its kept state
	// (etcd: the same data directory). The suite closes all its clients of
	// the restarted coordinator before and opens new ones after. nil means
	// that closing every client and opening new ones is a restart (local).
	Restart func(t testing.TB)

	// ShortTTL is the TTL the suite requests for leases it lets expire. The
	// backend may grant more (etcd grants whole seconds and has a minimum);
	// the suite always waits by the granted Lease.TTL. Default 1s.
	ShortTTL time.Duration

	// Spawn returns an unstarted command that runs the suite's helper in a
	// separate process on the same coordinator, with args (build it with
	// HelperCommand and add what the helper's open function needs to find
	// the coordinator). nil skips the multi-process cases. The suite sets
	// the command's stdin (a helper exits when it closes) and stdout, and
	// kills and reaps every process it starts.
	Spawn func(t testing.TB, args ...string) *exec.Cmd

	// ProcessLeases says the backend honours AcquireOptions.Process and
	// ProcessAttacher (local): a lease whose attached processes are all gone
	// is handed over before its TTL, and an expired holder's command group
	// is stopped before its successor holds. Requires Spawn.
	ProcessLeases bool

	// StateFile, when set, returns the path of the file that holds the state
	// of lock name, which must exist (the lock was used). It enables the
	// fail-closed cases: a corrupt, truncated, empty or symlinked state file
	// is ErrUnavailable and is never reset.
	StateFile func(t testing.TB, name string) string
}

// guard bounds every wait of the suite that should end much sooner: it only
// turns a hang into a failure. (A variable only for the package's own tests.)
var guard = 30 * time.Second

// Run runs the conformance suite against h. Cases that restart the
// coordinator run first, one at a time; the others then run in parallel.
func Run(t *testing.T, h Harness) {
	if h.New == nil {
		t.Fatal("coordtest: Harness.New is nil")
	}
	if h.ShortTTL <= 0 {
		h.ShortTTL = time.Second
	}
	s := &suite{h: h}
	t.Run("TokensAcrossRestart", s.tokensAcrossRestart)
	t.Run("LimitPersists", s.limitPersists)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.run(s, t)
		})
	}
}

type suite struct {
	h   Harness
	seq atomic.Int64
}

var cases = []struct {
	name string
	run  func(*suite, *testing.T)
}{
	{"MutualExclusion", (*suite).mutualExclusion},
	{"FIFO", (*suite).fifo},
	{"NoWait", (*suite).noWait},
	{"Timeout", (*suite).timeout},
	{"ExpiryTakeover", (*suite).expiryTakeover},
	{"ExpiryFree", (*suite).expiryFree},
	{"RenewKeepsLease", (*suite).renewKeepsLease},
	{"ReleaseIdempotent", (*suite).releaseIdempotent},
	{"BadLeaseID", (*suite).badLeaseID},
	{"Revoke", (*suite).revoke},
	{"StopRequest", (*suite).stopRequest},
	{"Inspect", (*suite).inspect},
	{"List", (*suite).list},
	{"NamesIndependent", (*suite).namesIndependent},
	{"NameBoundaries", (*suite).nameBoundaries},
	{"Watch", (*suite).watch},
	{"Queue", (*suite).queue},
	{"BadInput", (*suite).badInput},
	{"ZeroOptions", (*suite).zeroOptions},
	{"CancelWhileWaiting", (*suite).cancelWhileWaiting},
	{"KilledHolderKeepsLease", (*suite).killedHolderKeepsLease},
	{"DeadWaiter", (*suite).deadWaiter},
	{"KilledContenders", (*suite).killedContenders},
	{"ProcessTakeover", (*suite).processTakeover},
	{"AttachProcessTakeover", (*suite).attachProcessTakeover},
	{"ExpiredHolderGroupStopped", (*suite).expiredHolderGroupStopped},
	{"CorruptStateFailsClosed", (*suite).corruptState},
	{"OnceRecords", (*suite).onceRecords},
	{"OnceNeedsTheLease", (*suite).onceNeedsTheLease},
	{"OnceRetention", (*suite).onceRetention},
	{"LimitFreeze", (*suite).limitFreeze},
	{"LimitFrozenHeld", (*suite).limitFrozenHeld},
	{"LimitPrefix", (*suite).limitPrefix},
	{"LimitWatch", (*suite).limitWatch},
	{"LimitUnderLoad", (*suite).limitUnderLoad},
	{"Slots", (*suite).slots},
	{"SlotsMixed", (*suite).slotsMixed},
	{"SlotsLimit", (*suite).slotsLimit},
	{"SlotsBurst", (*suite).slotsBurst},
	{"SlotsChurn", (*suite).slotsChurn},
}

// client opens a new client that is closed when t ends.
func (s *suite) client(t testing.TB) coord.Coordinator {
	t.Helper()
	c := s.h.New(t)
	if c == nil {
		t.Fatal("Harness.New returned nil")
	}
	var closed atomic.Bool
	t.Cleanup(func() {
		if closed.CompareAndSwap(false, true) {
			if err := c.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
		}
	})
	return closedOnce{c, &closed}
}

// closedOnce lets a case close a client early without the cleanup closing it
// again.
type closedOnce struct {
	coord.Coordinator
	closed *atomic.Bool
}

func (c closedOnce) Close() error {
	if c.closed.CompareAndSwap(false, true) {
		return c.Coordinator.Close()
	}
	return nil
}

// name returns a lock name unique to this test run and case.
func (s *suite) name(t testing.TB, suffix string) string {
	base := t.Name()
	if i := strings.LastIndexByte(base, '/'); i >= 0 {
		base = base[i+1:]
	}
	return fmt.Sprintf("ct-%s-%d/%s", base, s.seq.Add(1), suffix)
}

// ctx returns a context that ends at the hang guard or when t ends.
func ctx(t testing.TB) context.Context {
	c, cancel := context.WithTimeout(context.Background(), guard)
	t.Cleanup(cancel)
	return c
}

// acquire takes a lease and checks what the backend returned.
func acquire(t testing.TB, c coord.Coordinator, name string, opts coord.AcquireOptions) *coord.Lease {
	t.Helper()
	l, err := tryAcquire(t, c, name, opts)
	if err != nil {
		t.Fatalf("Acquire(%q, wait %v): %v", name, opts.Wait, err)
	}
	return l
}

// tryAcquire is acquire that returns the error.
func tryAcquire(t testing.TB, c coord.Coordinator, name string, opts coord.AcquireOptions) (*coord.Lease, error) {
	t.Helper()
	return acquireCtx(ctx(t), t, c, name, opts)
}

func acquireCtx(cx context.Context, t testing.TB, c coord.Coordinator, name string, opts coord.AcquireOptions) (*coord.Lease, error) {
	t.Helper()
	if opts.TTL == 0 {
		opts.TTL = guard
	}
	before := time.Now()
	l, err := c.Acquire(cx, name, opts)
	after := time.Now()
	if err != nil {
		if l != nil {
			t.Errorf("Acquire(%q) returned a lease with error %v", name, err)
		}
		return nil, err
	}
	if l == nil {
		t.Fatalf("Acquire(%q) returned nil lease and nil error", name)
	}
	checkLease(t, l, name, opts, before, after)
	return l, nil
}

// checkLease checks the fields of a granted lease.
func checkLease(t testing.TB, l *coord.Lease, name string, opts coord.AcquireOptions, before, after time.Time) {
	t.Helper()
	if l.Name != name {
		t.Errorf("lease name %q, want %q", l.Name, name)
	}
	if opts.Holder != "" && l.Holder != opts.Holder {
		t.Errorf("lease holder %q, want %q", l.Holder, opts.Holder)
	}
	if l.Holder == "" {
		t.Errorf("lease of %q has no holder", name)
	}
	if l.Token == 0 {
		t.Errorf("lease of %q has token 0", name)
	}
	if l.ID == "" {
		t.Errorf("lease of %q has no id", name)
	}
	if l.TTL < opts.TTL {
		t.Errorf("lease of %q granted TTL %v, less than the requested %v", name, l.TTL, opts.TTL)
	}
	if l.AcquiredAt.Before(before.Add(-time.Minute)) || l.AcquiredAt.After(after.Add(time.Minute)) {
		t.Errorf("lease of %q acquired at %v, but the call ran at %v (wall clock)", name, l.AcquiredAt, after)
	}
	// Sent may precede the call (a lease granted ahead, a waiter's last
	// renewal), by at most a renewal interval; it may never follow it.
	if l.Sent.Before(before.Add(-l.TTL/3)) || l.Sent.After(after) {
		t.Errorf("lease of %q: Sent %v is outside [%v, %v] (the Acquire call, less TTL/3)", name, l.Sent, before.Add(-l.TTL/3), after)
	}
}

// release releases and fails the test on error.
func release(t testing.TB, c coord.Coordinator, l *coord.Lease) {
	t.Helper()
	if err := c.Release(ctx(t), l.Name, l.ID); err != nil {
		t.Fatalf("Release(%q, %q): %v", l.Name, l.ID, err)
	}
}

// inspect returns the lock's state and fails the test on error.
func inspect(t testing.TB, c coord.Coordinator, name string) coord.LockInfo {
	t.Helper()
	info, err := c.Inspect(ctx(t), name)
	if err != nil {
		t.Fatalf("Inspect(%q): %v", name, err)
	}
	if info.Name != name {
		t.Errorf("Inspect(%q) returned name %q", name, info.Name)
	}
	return info
}

// wantHeldBy checks that name is held by lease l.
func wantHeldBy(t testing.TB, c coord.Coordinator, l *coord.Lease) {
	t.Helper()
	info := inspect(t, c, l.Name)
	if !info.Held || info.Token != l.Token || info.LeaseID != l.ID {
		t.Errorf("Inspect(%q) = held %v token %d lease %q, want held by token %d lease %q",
			l.Name, info.Held, info.Token, info.LeaseID, l.Token, l.ID)
	}
}

// wantErr checks errors.Is(err, want).
func wantErr(t testing.TB, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Errorf("%s: error %v, want %v", what, err, want)
	}
}

// result is the outcome of an Acquire run in a goroutine.
type result struct {
	l   *coord.Lease
	err error
	at  time.Time // when Acquire returned

	name   string
	opts   coord.AcquireOptions
	before time.Time
}

// goAcquire runs Acquire in a goroutine; the channel receives its result,
// which await checks.
func goAcquire(cx context.Context, c coord.Coordinator, name string, opts coord.AcquireOptions) <-chan result {
	ch := make(chan result, 1)
	if opts.TTL == 0 {
		opts.TTL = guard
	}
	go func() {
		r := result{name: name, opts: opts, before: time.Now()}
		r.l, r.err = c.Acquire(cx, name, opts)
		r.at = time.Now()
		ch <- r
	}()
	return ch
}

// await waits for a goroutine's result, failing the test at the guard, and
// checks a granted lease.
func await(t testing.TB, ch <-chan result, what string) result {
	t.Helper()
	select {
	case r := <-ch:
		switch {
		case r.err == nil && r.l == nil:
			t.Fatalf("%s: Acquire returned nil lease and nil error", what)
		case r.err == nil:
			checkLease(t, r.l, r.name, r.opts, r.before, r.at)
		case r.l != nil:
			t.Errorf("%s: Acquire returned a lease with error %v", what, r.err)
		}
		return r
	case <-time.After(guard):
		t.Fatalf("%s: no result after %v", what, guard)
		return result{}
	}
}

// notify returns an OnWait that closes ch (once, should a backend call it
// twice).
func notify(ch chan struct{}) func(coord.LockInfo) {
	var once sync.Once
	return func(coord.LockInfo) { once.Do(func() { close(ch) }) }
}

// signalled waits for ch to be closed, failing at the guard.
func signalled(t testing.TB, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(guard):
		t.Fatalf("%s: did not happen within %v", what, guard)
	}
}
