package local

import (
	"fmt"
	"slices"

	"github.com/fence-dev/fence/internal/proc"
	"github.com/fence-dev/fence/pkg/clock"
	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/internal/coordkit"
)

// Semaphores (coord.AcquireOptions.Slots above 1). The state records the
// lock's slots ("slots") and keeps its oldest holder in "holder", as a
// lock's, and the others in "holders", by token. Such a state is written
// as format 3 (slotsVersion), which a fence of format 2 refuses rather
// than take the extra holders for nothing; it has no lease record at the
// fixed offset, so its every change replaces the state (a renewal too). A
// state without slots stays format 2.

// slotsVersion is the format of a semaphore's state.
const slotsVersion = 3

// slotted reports whether st is a semaphore's state.
func (st *state) slotted() bool { return st.Slots > 1 || len(st.Others) > 0 }

// holders returns every holder on record, oldest first: Holder, then
// Others.
func (st *state) holders() []*holder {
	if st.Holder == nil {
		return st.Others
	}
	return append([]*holder{st.Holder}, st.Others...)
}

// lease returns the holder on record with leaseID, or nil.
func (st *state) lease(leaseID string) *holder {
	for _, h := range st.holders() {
		if h.LeaseID == leaseID {
			return h
		}
	}
	return nil
}

// remove drops h from the holders on record; the oldest of the others
// becomes Holder when h was it.
func (st *state) remove(h *holder) {
	if st.Holder == h {
		st.Holder = nil
	} else {
		st.Others = slices.DeleteFunc(st.Others, func(o *holder) bool { return o == h })
	}
	st.promote()
}

// promote makes the oldest of Others the Holder when there is none.
func (st *state) promote() {
	if st.Holder == nil && len(st.Others) > 0 {
		st.Holder, st.Others = st.Others[0], slices.Clone(st.Others[1:])
	}
	if len(st.Others) == 0 {
		st.Others = nil
	}
}

// lockView is the judgement of every holder of a lock at one instant.
type lockView struct {
	// v is the lock's verdict, as a lock's holder's is read: free when a
	// slot is free; otherwise the times and processes at which that may
	// change, and a holder to stop (kill) before a slot frees.
	v verdict
	// busy are the holders that occupy a slot (live, or ended with their
	// command still to stop), oldest first; live those of them that are
	// live; ended the holders that occupy nothing any more.
	busy, live, ended []*holder
}

// judgeAll judges every holder of st at now (a lock's one holder as a
// semaphore's of one slot).
func judgeAll(st *state, now clock.Boot) (lockView, error) {
	var w lockView
	for _, h := range st.holders() {
		v, err := assess(h, now)
		if err != nil {
			return lockView{}, err
		}
		if v.free {
			w.ended = append(w.ended, h)
			continue
		}
		w.busy = append(w.busy, h)
		if v.live {
			w.live = append(w.live, h)
		}
		// What a waiter follows: every holder's processes and expiry; what
		// the first waiter must stop when no slot is free: the first holder
		// whose command outlived its lease.
		w.v.waitOn = append(w.v.waitOn, v.waitOn...)
		if v.until != 0 && (w.v.until == 0 || v.until < w.v.until) {
			w.v.until = v.until
		}
		if v.kill && !w.v.kill {
			w.v.kill, w.v.pgid, w.v.group = true, v.pgid, v.group
		}
	}
	if len(w.busy) < coordkit.SlotsOf(st.Slots) {
		w.v.free, w.v.why = true, "was released"
		w.v.kill, w.v.pgid, w.v.group = false, 0, nil
	}
	return w, nil
}

// freeSlot is the lowest slot that no busy holder of w has.
func (w lockView) freeSlot() int {
	for s := 0; ; s++ {
		if !slices.ContainsFunc(w.busy, func(h *holder) bool { return h.Slot == s }) {
			return s
		}
	}
}

// liveLease returns the holder of st with leaseID, for the operations on
// one lease, when it is live; otherwise the ErrLeaseLost error (lost), or
// the error of judging it.
func liveLease(name string, st *state, leaseID string, now clock.Boot) (*holder, error) {
	h := st.lease(leaseID)
	if h == nil && !st.slotted() {
		h = st.Holder // judged, and found to be another's, below
	}
	v, err := assess(h, now)
	if err != nil {
		return nil, err
	}
	if h == nil || h.LeaseID != leaseID || !v.live {
		return nil, lost(name, leaseID, st, v)
	}
	return h, nil
}

// pick returns the live holder of st with token, or the only one for token
// 0, and the lock's info; ErrNotHeld when there is none, ErrOtherToken when
// token is not a live holder's, coordkit.ManyHolders for token 0 with several.
func pick(name string, st *state, token uint64, now clock.Boot, self proc.ID) (*holder, coord.LockInfo, error) {
	w, err := judgeAll(st, now)
	if err != nil {
		return nil, coord.LockInfo{}, err
	}
	li := info(st, w, now, self)
	live := w.live
	switch {
	case len(live) == 0:
		return nil, li, fmt.Errorf("%w: lock %q", coord.ErrNotHeld, name)
	case token == 0 && len(live) > 1:
		return nil, li, coordkit.ManyHolders(li)
	case token == 0:
		return live[0], li, nil
	}
	for _, h := range live {
		if h.Token == token {
			// The info is of the holder picked (a semaphore's Holders: it
			// alone).
			coordkit.SetHolders(&li, li.Slots, []coord.HolderInfo{holderInfo(h, now)})
			return h, li, nil
		}
	}
	if len(live) == 1 {
		h := live[0]
		return nil, li, fmt.Errorf("%w: lock %q is held by %s under token %d, not %d", coord.ErrOtherToken, name, h.Holder, h.Token, token)
	}
	return nil, li, fmt.Errorf("%w: lock %q has no holder with token %d (%s)", coord.ErrOtherToken, name, token, coordkit.ManyHolders(li))
}

// holderInfo is what readers see of a live holder.
func holderInfo(h *holder, now clock.Boot) coord.HolderInfo {
	hi := coord.HolderInfo{Slot: h.Slot, Holder: h.Holder, Token: h.Token, LeaseID: h.LeaseID, TTL: h.TTL,
		TTLLeft: max(0, h.ExpiresAt.Sub(now)), AcquiredAt: h.AcquiredAt}
	if h.attached() {
		p := &coord.ProcessInfo{}
		for _, id := range h.PIDs {
			p.PIDs = append(p.PIDs, id.PID)
		}
		if h.Group != nil {
			p.PGID = h.Group.PID
		}
		hi.Process = p
	}
	return hi
}
