//go:build !linux

package proc

import (
	"errors"
	"fmt"
	"syscall"
)

var errUnsupported = fmt.Errorf("process inspection needs Linux: %w", errors.ErrUnsupported)

// ReadStat is not supported on this system.
func ReadStat(pid int) (Stat, error) { return Stat{}, errUnsupported }

// Lookup is not supported on this system.
func Lookup(pid int) (ID, error) { return ID{}, errUnsupported }

// GroupMembers is not supported on this system.
func GroupMembers(pgid int, leader ID) ([]ID, error) { return nil, errUnsupported }

// Descendants is not supported on this system.
func Descendants(root int) ([]Stat, error) { return nil, errUnsupported }

// SignalDescendants is not supported on this system.
func SignalDescendants(root int, sig syscall.Signal, skip func(Stat) bool) (int, error) {
	return 0, errUnsupported
}
