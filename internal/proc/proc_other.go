//go:build !linux

package proc

import (
	"context"
	"errors"
	"fmt"
	"syscall"
)

var errUnsupported = fmt.Errorf("process inspection needs Linux: %w", errors.ErrUnsupported)

// ReadStat is not supported on this system.
func ReadStat(pid int) (Stat, error) { return Stat{}, errUnsupported }

// Lookup is not supported on this system.
func Lookup(pid int) (ID, error) { return ID{}, errUnsupported }

// Self is not supported on this system.
func Self() (ID, error) { return ID{}, errUnsupported }

// GroupMembers is not supported on this system.
func GroupMembers(pgid int, leader ID) ([]ID, error) { return nil, errUnsupported }

// SignalGroup is not supported on this system.
func SignalGroup(pgid int, sig syscall.Signal) error { return errUnsupported }

// WaitExit is not supported on this system.
func WaitExit(ctx context.Context, id ID) error { return errUnsupported }

// WaitAny is not supported on this system.
func WaitAny(ctx context.Context, ids ...ID) (ID, error) { return ID{}, errUnsupported }

// PIDNamespace is "" on this system.
func PIDNamespace() string { return "" }

// Descendants is not supported on this system.
func Descendants(root int) ([]Stat, error) { return nil, errUnsupported }

// SignalDescendants is not supported on this system.
func SignalDescendants(root int, sig syscall.Signal, skip func(Stat) bool) (int, error) {
	return 0, errUnsupported
}

// SignalID is not supported on this system.
func SignalID(id ID, sig syscall.Signal) error { return errUnsupported }
