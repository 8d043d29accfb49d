package local

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"

	"golang.org/x/sys/unix"

	"github.com/fence-dev/fence/pkg/clock"
	"github.com/fence-dev/fence/pkg/coord"
)

// Stop requests and the lease watch.
//
// An ask (RequestStop) is recorded in the lock's state, under the flock, as
// ext.stop = {"token": N}: it names the holder's token, so it can never
// reach a later holder (tokens are never issued twice), and it stays there
// for a holder whose watch starts after it. It goes in ext, which fence
// versions that do not know it keep as they found it.
//
// The wake-up is a write of one byte to the lock's lock file (the file taken
// with flock around each update; nothing else ever writes to it, and
// opening it for the flock raises no inotify event): the holder's lease
// watch (WatchLease, `fence run`) and a revoker waiting for the end of the
// hold (WaitEnded) watch that one file with inotify, so only they wake, and
// at once. Revoke writes to it too, so that a lease ended by force is
// noticed at once as well, and so does a Release that ends a lease whose
// holder was asked to stop (the revoker waits for it). Renewals, grants and
// every other release write nothing there: a lease watch costs nothing
// while no one asks.

// stopAsk is ext.stop.
type stopAsk struct {
	Token uint64 `json:"token"`
}

const extStop = "stop"

// stopAsked returns the token named by the state's stop request, 0 when
// there is none (or it cannot be read: a request is then as good as none,
// and the revoker ends the lease at its timeout).
func stopAsked(st *state) uint64 {
	raw, ok := st.Ext[extStop]
	if !ok {
		return 0
	}
	var a stopAsk
	if json.Unmarshal(raw, &a) != nil {
		return 0
	}
	return a.Token
}

// ringLock writes one byte to the lock file of f, waking the lease watches
// and the WaitEnded calls of the lock. A lock file that is missing or that
// openFile refuses is left alone.
func (c *coordinator) ringLock(f lockFiles) {
	file, _, err := openFile(f.share, "lock file", f.lock, unix.O_WRONLY, math.MaxInt64)
	if file == nil || err != nil {
		return
	}
	defer file.Close()
	_, _ = file.WriteAt([]byte{'!'}, 0)
}

// RequestStop implements coord.Coordinator. A lease is asked when it is
// attached to processes (fence run) and one of its supervising processes
// is alive (or it was recorded in another PID namespace, where they cannot
// be checked): they are the ones who answer. A lease taken without
// processes (fence acquire), or whose supervisors are gone, is not asked.
func (c *coordinator) RequestStop(ctx context.Context, name string, token uint64) (coord.LockInfo, bool, error) {
	return c.onHolder(ctx, name, token, func(st *state, h *holder) (stateWrite, bool) {
		switch {
		case len(h.PIDs) == 0 || !supervised(h):
			return noChange, false
		case stopAsked(st) == h.Token || h.StopAsked:
			return noChange, true // asked already
		case st.slotted():
			h.StopAsked = true // each holder of a semaphore is asked on its own
			return rewrite, true
		}
		if st.Ext == nil {
			st.Ext = map[string]json.RawMessage{}
		}
		st.Ext[extStop] = json.RawMessage(fmt.Sprintf(`{"token":%d}`, h.Token))
		return rewrite, true
	})
}

// supervised reports whether one of h's supervising processes may answer an
// ask: one is alive, or they are in another PID namespace.
func supervised(h *holder) bool {
	if !h.ours() {
		return true
	}
	for _, id := range h.PIDs {
		if id.Alive() {
			return true
		}
	}
	return false
}

// WaitEnded implements coord.Coordinator. It follows the hold as a
// waiter does, without a place in the queue: it wakes when the lock file
// is written (the holder released after an ask, or the lease was revoked),
// when one of the holder's processes exits, and at the lease's expiry.
func (c *coordinator) WaitEnded(ctx context.Context, name string, token uint64) error {
	if err := coord.ValidateName(name); err != nil {
		return err
	}
	if token == 0 {
		return fmt.Errorf("%w: WaitEnded needs a token", coord.ErrInvalid)
	}
	f := c.files(name)
	sub, err := c.subscribe(f.lock, f.lock)
	if err != nil {
		return err
	}
	defer sub.close()
	for {
		st, err := load(f)
		if err != nil {
			return err
		}
		var h *holder
		for _, o := range st.holders() {
			if o.Token == token {
				h = o
			}
		}
		v, err := assess(h, clock.Now())
		if err != nil {
			return err
		}
		if !v.live {
			return nil
		}
		if _, err := c.sleep(ctx, sub, v.waitOn, untilWake(v.until)); err != nil {
			return err
		}
	}
}

// WatchLease implements coord.Coordinator. It wakes only when the lock's
// lock file is written (see above), then reads the state: a stop request
// for the lease's token is ErrStopRequested; the lease no longer live
// (revoked, released or replaced, expired, abandoned) is ErrLeaseLost.
// Without inotify it reads the state every 200ms. A state that cannot be
// read ends the watch without a report: renewals find out then.
func (c *coordinator) WatchLease(ctx context.Context, name, leaseID string) (<-chan error, error) {
	if err := coord.ValidateName(name); err != nil {
		return nil, err
	}
	if leaseID == "" {
		return nil, fmt.Errorf("%w: empty lease id", coord.ErrInvalid)
	}
	f := c.files(name)
	sub, err := c.subscribe(f.lock, f.lock)
	if err != nil {
		return nil, err
	}
	ch := make(chan error, 1)
	go func() {
		defer close(ch)
		defer sub.close()
		for {
			st, err := load(f)
			if err != nil {
				return
			}
			h, err := liveLease(f.name, st, leaseID, clock.Now())
			switch {
			case errors.Is(err, coord.ErrLeaseLost):
				ch <- err
				return
			case err != nil:
				return
			case stopAsked(st) == h.Token || h.StopAsked:
				ch <- fmt.Errorf("%w: lease %s on lock %q (token %d): a stop was requested", coord.ErrStopRequested, leaseID, f.name, h.Token)
				return
			}
			if _, err := c.sleep(ctx, sub, nil, -1); err != nil {
				return
			}
		}
	}()
	return ch, nil
}
