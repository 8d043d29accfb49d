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

// watchingWrapper is a decorator with a capability of its own.
type watchingWrapper struct{ wrapper }

func (watchingWrapper) WatchLease(context.Context, string, string) (<-chan error, error) {
	return nil, nil
}

// TestAs: a capability is found on the coordinator itself or through any
// number of Unwrap decorators, the outermost first; not past a decorator
// without Unwrap; never on nil. A concrete type is found the same way.
func TestAs(t *testing.T) {
	w := watchingCoord{}
	ww := watchingWrapper{wrapper{inner: w}}
	for name, tc := range map[string]struct {
		c    Coordinator
		want LeaseWatcher
	}{
		"itself":            {w, w},
		"wrapped twice":     {wrapper{inner: wrapper{inner: w}}, w},
		"decorator's own":   {wrapper{inner: ww}, ww},
		"none":              {plainCoord{}, nil},
		"wrapped none":      {wrapper{inner: plainCoord{}}, nil},
		"wrapped nil":       {wrapper{}, nil},
		"hidden (embedded)": {plainCoord{w}, nil},
		"nil":               {nil, nil},
	} {
		var got LeaseWatcher
		found := As(tc.c, &got)
		if found != (tc.want != nil) || got != tc.want {
			t.Errorf("%s: As = %v, %v; want %v", name, found, got, tc.want)
		}
	}
	var p plainCoord
	if !As(Coordinator(wrapper{inner: plainCoord{w}}), &p) || p != (plainCoord{w}) {
		t.Errorf("As(concrete type) = %v", p)
	}
	kept := LeaseWatcher(w)
	if As(Coordinator(plainCoord{}), &kept) || kept != w {
		t.Errorf("As changed the target on no match: %v", kept)
	}
}
