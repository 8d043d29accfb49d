package supervise

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fence-dev/fence/internal/exitcode"
	"github.com/fence-dev/fence/pkg/clock"
	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/history"
)

// `fence run --once KEY`: the command runs at most once to success per
// (lock, key). Run checks for the key's completion record before it
// acquires (oncePending) and again once it holds the lease, and after a
// command that exited 0 while the lease was still safe (by the watchdog's
// boot-clock record of its death against the hold's safe-until) writes the
// record with the coordinator's atomic check that the lease still holds the
// lock (onceComplete), before the release.

// oncePending checks the key's record. It returns ok when the command is to
// run; otherwise the exit code and the error (wrapping coord.ErrCompleted
// when the job is done) to return.
func (r *Runner) oncePending(ctx context.Context) (ok bool, code int, err error) {
	p := r.p
	if p.Once == "" {
		return true, 0, nil
	}
	rec, done, err := r.c.Completion(ctx, p.Lock, p.Once)
	if err != nil {
		return false, exitcode.Failure, fmt.Errorf("--once: %w", err)
	}
	if !done {
		return true, 0, nil
	}
	r.m.skipped, r.m.lastCompletion = true, rec.Finished
	r.recordOnce(ctx, history.Event{Kind: history.Skipped, AcceptedToken: rec.Token})
	by := cmp.Or(rec.Holder, "hand")
	tok := ""
	if rec.Token != 0 {
		tok = fmt.Sprintf(", token %d", rec.Token)
	}
	return false, p.DoneExitCode, &doneError{fmt.Sprintf("%q is done for key %q (it ran to success at %s, by %s%s): nothing to run",
		p.Lock, p.Once, rec.Finished.UTC().Format(time.RFC3339), by, tok)}
}

// doneError is the outcome of a --once run whose key was done: it wraps
// coord.ErrCompleted, which -q keeps off stderr.
type doneError struct{ msg string }

func (e *doneError) Error() string        { return e.msg }
func (e *doneError) Is(target error) bool { return target == coord.ErrCompleted }

// onceComplete writes the completion record after the command, when it
// succeeded while the lease was safe; it returns the code and error to exit
// with.
func (r *Runner) onceComplete(ctx context.Context, code int, runErr error) (int, error) {
	p := r.p
	if p.Once == "" || code != 0 || runErr != nil || r.end.exit == nil || r.end.exit.Code != 0 || r.end.exit.Signal != 0 {
		return code, runErr
	}
	held := r.hs.helds[0] // --once takes one lock
	lease := held.Lease()
	if su := bootSafeUntil(held); r.end.exit.Died > su {
		r.m.lost = true
		return exitcode.LeaseLost, fmt.Errorf("%w: the command exited 0 %v after the lease on %q (token %d) could no longer be trusted: its completion of %q is not recorded",
			coord.ErrLeaseLost, r.end.exit.Died.Sub(su).Round(time.Millisecond), p.Lock, lease.Token, p.Once)
	}
	// The command's start and end on the wall clock, from the watchdog's
	// boot-clock records of them.
	finished := time.Now().Add(-clock.Now().Sub(r.end.exit.Died))
	rec := coord.Completion{
		Lock: p.Lock, Key: p.Once, Holder: lease.Holder, Token: lease.Token,
		Started: finished, Finished: finished,
	}
	if r.started != nil {
		rec.Started = finished.Add(-r.end.exit.Died.Sub(r.started.At))
	}
	err := r.c.Complete(ctx, lease.ID, rec, p.OnceKeep)
	switch {
	case errors.Is(err, coord.ErrLeaseLost):
		r.m.lost = true
		return exitcode.LeaseLost, err
	case err != nil:
		return exitcode.Failure, fmt.Errorf("the command succeeded, but its completion of %q could not be recorded (the next run will run it again): %w", p.Once, err)
	}
	r.m.completed, r.m.lastCompletion = true, rec.Finished
	r.verbosef("recorded the completion of %q for key %q (token %d)", p.Lock, p.Once, lease.Token)
	r.recordOnce(ctx, history.Event{Kind: history.Completed, Token: lease.Token})
	return 0, nil
}

// recordOnce leaves a completed or skipped event in the lock's history.
func (r *Runner) recordOnce(ctx context.Context, e history.Event) {
	h, ok := r.c.(history.Store)
	if !ok {
		return
	}
	e.Time, e.Lock, e.Key, e.Holder = time.Now(), r.p.Lock, r.p.Once, cmp.Or(r.p.Holder, coord.DefaultHolder())
	_ = h.Record(ctx, e)
}
