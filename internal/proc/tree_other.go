//go:build !linux

package proc

import (
	"errors"
	"fmt"
	"syscall"
)

// Descendants is not supported outside Linux.
func Descendants(root int) ([]Stat, error) {
	return nil, fmt.Errorf("descendants of %d: %w", root, errors.ErrUnsupported)
}

// SignalDescendants is not supported outside Linux.
func SignalDescendants(root int, sig syscall.Signal, skip func(Stat) bool) (int, error) {
	return 0, fmt.Errorf("signal descendants of %d: %w", root, errors.ErrUnsupported)
}

// SignalID is not supported outside Linux.
func SignalID(id ID, sig syscall.Signal) error {
	return fmt.Errorf("signal %d: %w", id.PID, errors.ErrUnsupported)
}
