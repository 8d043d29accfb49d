package fencing

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fence-dev/fence/pkg/clock"
	"github.com/fence-dev/fence/pkg/coord"
)

// Set is several leases held together, taken by AcquireSet. Its methods are
// safe for concurrent use.
type Set struct {
	order     []int // indexes into helds, in byte order of the names
	ctx       context.Context
	cancel    context.CancelCauseFunc
	onRenewal func(*Held, error)

	mu       sync.Mutex // guards helds while they are taken, last, complete
	helds    []*Held    // as names; nil until taken
	last     clock.Boot // the last earliest safe-until reported
	complete bool
}

// SetError is AcquireSet's error when one lock of the set was not taken:
// Lock names it, Err is why (it wraps coord.ErrBusy when the lock was held
// until the wait ran out, the context's error, or a *LostError when a lease
// already taken was lost meanwhile). Every lease taken before was released.
type SetError struct {
	Lock string
	Err  error
}

func (e *SetError) Error() string {
	var lost *LostError
	switch {
	case errors.Is(e.Err, coord.ErrBusy):
		return e.Err.Error() // the coordinator's busy error names the lock
	case errors.As(e.Err, &lost):
		return fmt.Sprintf("%v, while waiting for %q", e.Err, e.Lock)
	default:
		return fmt.Sprintf("waiting for %q: %v", e.Lock, e.Err)
	}
}

func (e *SetError) Unwrap() error { return e.Err }

// AcquireSet takes a lease on every lock of names and holds them all (see
// Hold), or none. The locks are always taken in byte order of their names,
// whatever their order in names: two programs that take overlapping sets
// never wait for each other in a cycle (A holds a and waits for b while B
// holds b and waits for a), so they cannot deadlock. Each lease is held
// (renewed) as soon as it is taken, while the next one is waited for.
//
// acq applies to every lock (OnWait is told which lock it waits for in
// the LockInfo's Name); acq.Wait is one budget for the whole set: the
// wait for each lock gets what is left of it (0 does not wait for any lock,
// coord.WaitForever waits until all are taken). When a lock is not taken
// (busy when the wait ran out, ctx ended, a lease already taken was lost
// meanwhile), the leases taken are released in reverse order and the error
// is a *SetError naming that lock. Names that are invalid or given twice
// are refused (coord.ErrInvalid) before any lock is taken.
//
// opts apply to every hold, except that OnRenewal, when set, is told of an
// acknowledgment with the hold whose safe-until comes first each time the
// set's safe-until (the earliest of the leases') becomes later, one call at
// a time, and of a failed renewal of any of the leases. ctx bounds the acquisition and the holds,
// as for Hold.
func AcquireSet(ctx context.Context, c coord.Coordinator, names []string, acq coord.AcquireOptions, options ...Option) (*Set, error) {
	opts := configOf(options)
	if len(names) == 0 {
		return nil, fmt.Errorf("%w: no lock to acquire", coord.ErrInvalid)
	}
	seen := make(map[string]bool, len(names))
	for _, n := range names {
		if err := coord.ValidateName(n); err != nil {
			return nil, err
		}
		if seen[n] {
			return nil, fmt.Errorf("%w: lock %q is named twice", coord.ErrInvalid, n)
		}
		seen[n] = true
	}
	if _, err := opts.resolve(acq.TTL); err != nil {
		return nil, err
	}
	s := &Set{helds: make([]*Held, len(names)), onRenewal: opts.OnRenewal}
	s.order = make([]int, len(names))
	for i := range s.order {
		s.order[i] = i
	}
	// strings.Compare compares byte by byte.
	slices.SortFunc(s.order, func(a, b int) int { return strings.Compare(names[a], names[b]) })
	s.ctx, s.cancel = context.WithCancelCause(context.Background())
	hopts := opts
	hopts.OnRenewal = func(h *Held, err error) {
		if err == nil {
			s.renewed()
		} else if opts.OnRenewal != nil {
			opts.OnRenewal(h, err)
		}
	}

	// A lease lost while a later lock is waited for ends that wait.
	actx, cancelAcq := context.WithCancelCause(ctx)
	defer cancelAcq(nil)
	var deadline time.Time
	if acq.Wait > 0 {
		deadline = time.Now().Add(acq.Wait)
	}
	fail := func(name string, err error) (*Set, error) {
		var lost *LostError
		if cause := context.Cause(actx); errors.As(cause, &lost) {
			err = cause
		}
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		s.cancel(err)
		_ = s.Release(rctx)
		return nil, &SetError{Lock: name, Err: err}
	}
	for _, i := range s.order {
		name := names[i]
		a := acq
		if acq.Wait > 0 {
			a.Wait = max(time.Until(deadline), 0)
		}
		if acq.OnWait != nil {
			a.OnWait = func(cur coord.LockInfo) {
				if cur.Name == "" {
					cur.Name = name
				}
				acq.OnWait(cur)
			}
		}
		l, err := c.Acquire(actx, name, a)
		if err == nil && actx.Err() != nil {
			releaseQuietly(ctx, c, l)
			err = context.Cause(actx)
		}
		if err != nil {
			return fail(name, err)
		}
		h, err := holdOn(ctx, c, l, hopts, bootClk{})
		if err != nil {
			releaseQuietly(ctx, c, l)
			return fail(name, err)
		}
		s.mu.Lock()
		s.helds[i] = h
		s.mu.Unlock()
		context.AfterFunc(h.Context(), func() {
			cause := context.Cause(h.Context())
			cancelAcq(cause)
			s.cancel(cause)
		})
	}
	s.mu.Lock()
	s.complete = true
	s.last = s.earliestLocked().Stats().SafeUntilBoot
	s.mu.Unlock()
	return s, nil
}

// renewed is told of a renewal of one of the leases.
func (s *Set) renewed() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.complete {
		return
	}
	e := s.earliestLocked() // every lease is taken
	if su := e.Stats().SafeUntilBoot; su > s.last {
		s.last = su
		if s.onRenewal != nil {
			s.onRenewal(e, nil)
		}
	}
}

// Context ends when any of the leases can no longer be trusted (its cause
// is that hold's: a *LostError naming the lock), after Release (cause
// ErrReleased), or when the context given to AcquireSet ends.
func (s *Set) Context() context.Context { return s.ctx }

// Helds are the holds, in the order the names were given (Held.Lease of
// each: the leases).
func (s *Set) Helds() []*Held {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.helds)
}

// earliestLocked is the hold taken whose safe-until comes first (s.mu
// held).
func (s *Set) earliestLocked() *Held {
	var e *Held
	for _, h := range s.helds {
		if h != nil && (e == nil || h.Stats().SafeUntilBoot < e.Stats().SafeUntilBoot) {
			e = h
		}
	}
	return e
}

// Check is Held.Check of every lease (in byte order of their names): nil
// when all are safe, else the first error.
func (s *Set) Check() error {
	helds := s.Helds()
	for _, i := range s.order {
		if h := helds[i]; h != nil {
			if err := h.Check(); err != nil {
				return err
			}
		}
	}
	return nil
}

// Release releases every lease, in reverse byte order of their names (the
// reverse of the order they were taken in), and cancels Context() (cause
// ErrReleased unless it was already cancelled). It goes on after an error
// and returns them all. It may be called more than once.
func (s *Set) Release(ctx context.Context) error {
	s.cancel(ErrReleased)
	helds := s.Helds()
	var errs []error
	for _, i := range slices.Backward(s.order) {
		if h := helds[i]; h != nil {
			if err := h.Release(ctx); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}
