package local

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fence-dev/fence/pkg/coord"
)

var _ coord.Coordinator = (*coordinator)(nil)

// RenewAsync implements coord.Coordinator: the renewals it is given run on
// one goroutine of the coordinator, one after the other, as Renew runs them,
// each taking the lock's flock without waiting. A renewal that finds the
// flock held (another process in the middle of an update of that lock) goes
// on as Renew, on a goroutine of its own that waits for it, so that no
// renewal waits behind another lock's; so does the rest of a batch after a
// slow renewal (slowRenewal). The goroutine ends when no renewal is left.
// pkg/fencing's scheduler, which sends the renewals due together, then
// starts no goroutine and makes no context per renewal: about a tenth of
// the CPU that 10,000 renewed local leases cost (docs/benchmarks.md).
func (c *coordinator) RenewAsync(name, leaseID string, done func(coord.Renewal, error)) (cancel func()) {
	r := &asyncRenewal{name: name, leaseID: leaseID, done: done}
	q := &c.renewals
	q.mu.Lock()
	q.queue = append(q.queue, r)
	start := !q.running
	q.running = true
	q.mu.Unlock()
	if start {
		go c.runRenewals()
	}
	return r.abandon
}

// renewQueue is the queue of RenewAsync's renewals.
type renewQueue struct {
	mu      sync.Mutex
	queue   []*asyncRenewal
	running bool // runRenewals runs (or is about to)
}

// asyncRenewal is one renewal of RenewAsync.
type asyncRenewal struct {
	name, leaseID string
	done          func(coord.Renewal, error)
	state         atomic.Int32 // renewQueued, renewTaken, renewWaiting, renewAnswered or renewAbandoned
	// stopWait ends the Renew of a renewal that runs on a goroutine of its
	// own (renewAlone), waiting for its flock maybe; set before its state
	// becomes renewWaiting.
	stopWait context.CancelFunc
}

// The states of an asyncRenewal. done is called once, by whoever moves it
// to renewAnswered (with Renew's answer) or to renewAbandoned (with
// context.Canceled; abandon when it was still queued, else the goroutine
// that ran it).
const (
	renewQueued    int32 = iota // in the queue
	renewTaken                  // runRenewals runs it
	renewWaiting                // it runs on a goroutine of its own (renewAlone), which may wait for its flock
	renewAnswered               // done was given Renew's answer
	renewAbandoned              // cancel was called first
)

// abandon is RenewAsync's cancel: the renewal is answered context.Canceled
// unless it was answered already (a queued one on a goroutine of its own,
// never on the caller's), and one that runs on a goroutine of its own stops
// waiting for its flock.
func (r *asyncRenewal) abandon() {
	for {
		switch s := r.state.Load(); s {
		case renewQueued, renewTaken, renewWaiting:
			if !r.state.CompareAndSwap(s, renewAbandoned) {
				continue
			}
			switch s {
			case renewQueued:
				go r.done(coord.Renewal{}, context.Canceled)
			case renewWaiting:
				r.stopWait()
			}
			return
		default:
			return
		}
	}
}

// answer gives done Renew's answer, or context.Canceled when the renewal
// was abandoned while it ran (from state from).
func (r *asyncRenewal) answer(from int32, res coord.Renewal, err error) {
	if !r.state.CompareAndSwap(from, renewAnswered) {
		res, err = coord.Renewal{}, context.Canceled
	}
	r.done(res, err)
}

// runRenewals runs the queued renewals until none is left.
func (c *coordinator) runRenewals() {
	q := &c.renewals
	for {
		q.mu.Lock()
		batch := q.queue
		q.queue = nil
		if len(batch) == 0 {
			q.running = false
			q.mu.Unlock()
			return
		}
		q.mu.Unlock()
		slow := false
		for i, r := range batch {
			batch[i] = nil
			if !r.state.CompareAndSwap(renewQueued, renewTaken) {
				continue // abandoned: answered already
			}
			if slow {
				c.renewAlone(r)
				continue
			}
			t := time.Now()
			res, err := c.Renew(noWait, r.name, r.leaseID)
			if errors.Is(err, errWouldWait) {
				c.renewAlone(r)
				continue
			}
			r.answer(renewTaken, res, err)
			slow = time.Since(t) > slowRenewal
		}
	}
}

// slowRenewal: after a renewal of runRenewals that took longer (a state
// that had to be replaced and synced, a slow disk), the rest of its batch
// runs as Renew would, each on a goroutine of its own, so that renewals
// that wait for the disk do it side by side rather than one after another.
// A renewal that rewrites its record in place takes about 15 µs.
const slowRenewal = time.Millisecond

// renewAlone runs a renewal as Renew does, on a goroutine of its own,
// which waits for the flock when it is held.
func (c *coordinator) renewAlone(r *asyncRenewal) {
	ctx, cancel := context.WithCancel(context.Background())
	r.stopWait = cancel
	if !r.state.CompareAndSwap(renewTaken, renewWaiting) {
		cancel()
		r.done(coord.Renewal{}, context.Canceled) // abandoned meanwhile
		return
	}
	go func() {
		res, err := c.Renew(ctx, r.name, r.leaseID)
		cancel()
		r.answer(renewWaiting, res, err)
	}()
}

// noWait is the context of a renewal of runRenewals: lockState returns
// errWouldWait instead of waiting for a flock that is held.
var noWait = context.WithValue(context.Background(), noWaitKey{}, true)

type noWaitKey struct{}

// errWouldWait: the flock is held, and the context said not to wait.
var errWouldWait = errors.New("the lock file's flock is held")
