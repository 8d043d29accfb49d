package coordtest

import (
	"reflect"
	"slices"
	"testing"

	"github.com/fence-dev/fence/pkg/history"

	"github.com/fence-dev/fence/pkg/coord"
)

// capability is one optional interface of package coord, found with
// coord.As.
type capability struct {
	name string
	find func(coord.Coordinator) (any, bool)
}

func capabilityOf[T any]() capability {
	return capability{reflect.TypeFor[T]().Name(), func(c coord.Coordinator) (any, bool) {
		var v T
		ok := coord.As(c, &v)
		return v, ok
	}}
}

// capabilities lists every optional interface of package coord (a test of
// this package fails when one is missing).
var capabilities = []capability{
	capabilityOf[coord.ProcessAttacher](),
	capabilityOf[coord.LeaseWatcher](),
	capabilityOf[coord.Peeker](),
	capabilityOf[coord.AsyncRenewer](),
	capabilityOf[history.Historian](),
	capabilityOf[coord.StopRequester](),
	capabilityOf[coord.Completer](),
	capabilityOf[coord.Limiter](),
}

// Capabilities returns the names of the optional capabilities of package
// coord that c has, as coord.As finds them.
func Capabilities(c coord.Coordinator) []string {
	var names []string
	for _, cp := range capabilities {
		if _, ok := cp.find(c); ok {
			names = append(names, cp.name)
		}
	}
	return names
}

// CheckDecorator checks that dec, a coordinator that decorates inner (its
// Unwrap chain leads there), keeps every optional capability of inner, and
// has none that inner lacks except those named in adds (its own, such as
// history.Recorder's Historian). A capability dec keeps but does not add
// must be inner's own, used past the decorator.
func CheckDecorator(t testing.TB, inner, dec coord.Coordinator, adds ...string) {
	t.Helper()
	for _, cp := range capabilities {
		iv, in := cp.find(inner)
		dv, out := cp.find(dec)
		own := slices.Contains(adds, cp.name)
		switch {
		case in && !out:
			t.Errorf("%T over %T: hides %s (coord.As finds it on %[2]T, not through %[1]T)", dec, inner, cp.name)
		case !in && out && !own:
			t.Errorf("%T over %T: claims %s, which %[2]T lacks", dec, inner, cp.name)
		case in && out && !own && !same(iv, dv):
			t.Errorf("%T over %T: %s is %T's, not %[2]T's", dec, inner, cp.name, dv)
		case own && !out:
			t.Errorf("%T over %T: lacks its own %s", dec, inner, cp.name)
		}
	}
}

// same reports whether two capabilities found are one value.
func same(a, b any) bool {
	ta, tb := reflect.TypeOf(a), reflect.TypeOf(b)
	return ta == tb && ta.Comparable() && a == b
}
