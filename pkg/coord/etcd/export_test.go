package etcd

import "time"

// Coordinator is the concrete coordinator New and NewFromClient return, for
// the tests of what it has beyond coord.Coordinator.
type Coordinator = coordinator

// Dial and FromClient are New and NewFromClient returning it.
var (
	Dial       = dial
	FromClient = fromClient
)

// LaneLastSends is when a keep-alive was last queued on each of c's lanes
// (zero: never), in the order of c's endpoints.
func LaneLastSends(c *coordinator) []time.Time {
	var ts []time.Time
	for _, l := range c.ka.lanes {
		var t time.Time
		if ns := l.lastSend.Load(); ns != 0 {
			t = time.Unix(0, ns)
		}
		ts = append(ts, t)
	}
	return ts
}
