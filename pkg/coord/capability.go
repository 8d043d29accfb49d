package coord

// Optional capabilities
//
// A backend may do more than Coordinator asks: ProcessAttacher,
// LeaseWatcher, Peeker, AsyncRenewer and Historian are the optional
// interfaces of this package. Code that uses one finds it with As, never
// with a type assertion of its own, so that a decorator (history.Recorder,
// which records the lease events of the coordinator it wraps) hides none of
// the capabilities of what it decorates.

// Unwrapper is implemented by a Coordinator that decorates another one:
// Unwrap returns the decorated coordinator. As looks through it.
//
// A decorator with Unwrap promises that every optional capability of the
// coordinator it wraps may be used directly, past the decorator: it must not
// change what those capabilities do (a decorator that changes Renew must
// implement AsyncRenewer itself, or have no Unwrap). A decorator that
// implements a capability itself is found first.
type Unwrapper interface {
	Unwrap() Coordinator
}

// As finds the first coordinator in c's chain of decorators (c, then
// c.Unwrap(), and so on) that is a T, stores it in *target and reports
// whether it found one, as errors.As does for errors. T is usually one of
// the optional capability interfaces, or a backend's concrete type:
//
//	var w coord.LeaseWatcher
//	if coord.As(c, &w) {
//		ch, err := w.WatchLease(ctx, name, id)
//		...
//	}
//
// *target is left alone when nothing matches. A nil c, or a decorator whose
// Unwrap returns nil, ends the search.
func As[T any](c Coordinator, target *T) bool {
	if target == nil {
		panic("coord.As: target is nil")
	}
	for c != nil {
		if v, ok := c.(T); ok {
			*target = v
			return true
		}
		u, ok := c.(Unwrapper)
		if !ok {
			return false
		}
		c = u.Unwrap()
	}
	return false
}
