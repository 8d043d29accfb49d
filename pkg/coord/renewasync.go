package coord

// AsyncRenewer is implemented by coordinators that can renew a lease without
// a goroutine waiting for the answer (etcd: one keep-alive on a shared
// stream, answered by the stream's receiver). pkg/fencing uses it to keep
// many leases renewed from one scheduler; with a coordinator that lacks it,
// each renewal is a Renew call on a goroutine of its own.
type AsyncRenewer interface {
	// RenewAsync starts a renewal of the lease (name, leaseID), as Renew
	// does, and returns at once: it never waits for the coordinator. done is
	// then called exactly once with what Renew would have returned, on
	// another goroutine: never within RenewAsync or cancel on the caller's
	// goroutine, so that the caller may hold a lock that done takes. done
	// must not block; it may run on the goroutine that receives every
	// renewal's answer.
	//
	// cancel abandons the renewal: unless done was already called or is
	// being called, it is called with an error that wraps context.Canceled.
	// cancel never blocks, and may be called more than once, and after done.
	//
	// A decorator that changes Renew must implement RenewAsync itself or
	// have no Unwrap (see Unwrapper), so that coord.As does not find the
	// wrapped one past it.
	RenewAsync(name, leaseID string, done func(Renewal, error)) (cancel func())
}
