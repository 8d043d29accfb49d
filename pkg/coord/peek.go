package coord

import "context"

// Peeker is implemented by coordinators that can read a lock's holder more
// cheaply without its TTL: Peek returns what Inspect does, except that TTL
// and TTLLeft may be zero. On etcd it saves the TimeToLive request.
type Peeker interface {
	Peek(ctx context.Context, name string) (LockInfo, error)
}

// Peek reads lock name through c's Peeker when it has one (found with As),
// else Inspect.
func Peek(ctx context.Context, c Coordinator, name string) (LockInfo, error) {
	var p Peeker
	if As(c, &p) {
		return p.Peek(ctx, name)
	}
	return c.Inspect(ctx, name)
}
