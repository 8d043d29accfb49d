// Package exitcode holds fence's exit code table (one table for every
// command) and the single place that maps an error to an exit code.
//
// A command returns an error; the CLI's entry point passes it to Code (which
// says how an error chooses its code) and exits with the result.
package exitcode

import (
	"errors"

	"github.com/fence-dev/fence/pkg/coord"
)

// The exit codes of the contract.
const (
	OK         = 0   // success; for run, the command succeeded
	No         = 1   // the answer is no: check (not the live holder), status (free)
	Busy       = 75  // the lock was not acquired in time
	LeaseLost  = 76  // the lease is lost or unsafe, or renew found no lease
	Stale      = 77  // a fenced write was refused: a larger token was accepted
	Deadline   = 124 // the command's deadline was reached and it was stopped
	Failure    = 125 // fence itself failed: usage, configuration, bad input, coordinator unreachable
	CannotExec = 126 // the command could not be executed
	NotFound   = 127 // the command was not found
)

// ErrStale is the error of a fenced write refused because a larger token was
// accepted for the key. Wrap it (fmt.Errorf("...: %w", exitcode.ErrStale)) to
// exit with Stale.
var ErrStale = errors.New("stale token")

// ErrUsage marks a usage error (a bad flag, a missing argument, conflicting
// flags). Wrap it to say so; it maps to Failure.
var ErrUsage = errors.New("usage")

// Coder is implemented by errors that carry their own exit code.
type Coder interface {
	ExitCode() int
}

// Error is an error with an explicit exit code.
type Error struct {
	Code int
	Err  error
	// Silent errors are not printed: the command has already said what it
	// had to (e.g. status printing a free lock and exiting 1).
	Silent bool
}

// New returns an error that exits with code and prints err.
func New(code int, err error) error { return &Error{Code: code, Err: err} }

// Silent returns an error that exits with code and prints nothing.
func Silent(code int) error { return &Error{Code: code, Silent: true} }

func (e *Error) Error() string {
	if e.Err == nil {
		return ""
	}
	return e.Err.Error()
}

func (e *Error) Unwrap() error { return e.Err }

// ExitCode implements Coder.
func (e *Error) ExitCode() int { return e.Code }

// Code maps an error to the exit code of the contract: nil is OK, an error
// carrying a code (Coder) gives that code, otherwise the first of these that
// the error wraps decides: coord.ErrBusy (Busy), coord.ErrLeaseLost
// (LeaseLost), ErrStale (Stale). Everything else, including coord.ErrInvalid,
// coord.ErrUnavailable, usage and configuration errors, is Failure.
func Code(err error) int {
	if err == nil {
		return OK
	}
	var c Coder
	if errors.As(err, &c) {
		return c.ExitCode()
	}
	switch {
	case errors.Is(err, coord.ErrBusy):
		return Busy
	case errors.Is(err, coord.ErrLeaseLost):
		return LeaseLost
	case errors.Is(err, ErrStale):
		return Stale
	}
	return Failure
}

// IsSilent reports whether err should exit without a message.
func IsSilent(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Silent
}
