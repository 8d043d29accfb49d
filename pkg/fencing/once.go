package fencing

import (
	"context"
	"fmt"
	"time"

	"github.com/fence-dev/fence/pkg/coord"
)

// Do runs fn at most once to success for key of lock name, across every
// process that shares the coordinator (`fence run --once` for Go
// programs): at-least-once until one success, at most one success per key.
//
// Do looks for the key's completion record before it acquires and again
// once it holds the lease; when there is one it runs nothing and returns an
// error wrapping coord.ErrCompleted. Otherwise fn runs under the held
// lease, with a context that ends at the lease's safe-until (see Held).
// When fn returns nil while the lease is still safe, the record is written
// in one step with the coordinator's check that the lease is still held,
// then the lease is released, and Do returns nil. When fn fails, no record
// is written and its error is returned (the next Do runs fn again). When
// the lease could not be trusted to the end of fn, or was lost before the
// record was written, no record is written and the error wraps
// coord.ErrLeaseLost: fn's work may have to be fenced by its token.
//
// acq says how to take the lease (its TTL is required; Wait 0 fails with
// coord.ErrBusy when another process holds the lock); opts tune the
// renewals (see Hold) and, with WithKeep, how long the record is kept.
func Do(ctx context.Context, c coord.Coordinator, name, key string, acq coord.AcquireOptions, fn func(ctx context.Context, h *Held) error, options ...Option) error {
	opts := configOf(options)

	if err := coord.ValidateKey(key); err != nil {
		return err
	}
	if err := coord.ValidateKeep(opts.Keep); err != nil {
		return err
	}
	done := func() error {
		rec, ok, err := c.Completion(ctx, name, key)
		switch {
		case err != nil:
			return err
		case ok:
			return fmt.Errorf("%w: %q for key %q (token %d, finished %s)", coord.ErrCompleted, name, key, rec.Token, rec.Finished.UTC().Format(time.RFC3339))
		}
		return nil
	}
	if err := done(); err != nil {
		return err
	}
	h, err := Acquire(ctx, c, name, acq, options...)
	if err != nil {
		return err
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	defer h.Release(rctx) //nolint:errcheck // the lease then ends at its TTL
	if err := done(); err != nil {
		return err
	}
	started := time.Now()
	if err := fn(h.Context(), h); err != nil {
		return err
	}
	if err := h.Check(); err != nil {
		return fmt.Errorf("%q for key %q: the lease could not be trusted to the end of the job, which is not recorded: %w", name, key, err)
	}
	l := h.Lease()
	return c.Complete(rctx, l.ID, coord.Completion{
		Lock: name, Key: key, Holder: l.Holder, Token: l.Token, Started: started, Finished: time.Now(),
	}, opts.Keep)
}
