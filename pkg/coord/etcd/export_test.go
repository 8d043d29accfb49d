package etcd

import "time"

// LaneLastSends is when a keep-alive was last queued on each of c's lanes
// (zero: never), in the order of c's endpoints.
func LaneLastSends(c *Coordinator) []time.Time {
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
