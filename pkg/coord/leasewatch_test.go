package coord

import (
	"context"
	"testing"
)

type plainCoord struct{ Coordinator }

type watchingCoord struct{ Coordinator }

func (watchingCoord) WatchLease(context.Context, string, string) (<-chan error, error) {
	return nil, nil
}

type wrapper struct {
	Coordinator
	inner Coordinator
}

func (w wrapper) Unwrap() Coordinator { return w.inner }

// TestLeaseWatcherOf: found on the coordinator itself or through any number
// of Unwrap decorators; nil when nobody has one.
func TestLeaseWatcherOf(t *testing.T) {
	w := watchingCoord{}
	for name, tc := range map[string]struct {
		c    Coordinator
		want bool
	}{
		"itself":        {w, true},
		"wrapped twice": {wrapper{inner: wrapper{inner: w}}, true},
		"none":          {plainCoord{}, false},
		"wrapped none":  {wrapper{inner: plainCoord{}}, false},
		"wrapped nil":   {wrapper{}, false},
		"nil":           {nil, false},
	} {
		if got := LeaseWatcherOf(tc.c); (got != nil) != tc.want {
			t.Errorf("%s: LeaseWatcherOf = %v, want found %v", name, got, tc.want)
		}
	}
}
