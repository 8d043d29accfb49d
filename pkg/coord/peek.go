package coord

import "context"

// Peeker is implemented by coordinators that can read a lock's holder more
// cheaply without its TTL: Peek returns what Inspect does, except that TTL
// and TTLLeft may be zero. On etcd it saves the TimeToLive request.
type Peeker interface {
	Peek(ctx context.Context, name string) (LockInfo, error)
}

// Peek reads lock name through c's Peek when it has one, else Inspect.
func Peek(ctx context.Context, c Coordinator, name string) (LockInfo, error) {
	if p, ok := c.(Peeker); ok {
		return p.Peek(ctx, name)
	}
	return c.Inspect(ctx, name)
}
