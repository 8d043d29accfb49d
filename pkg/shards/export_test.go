package shards

// Options is what the Options set, for tests that set it whole.
type Options = options

// Opts sets the whole of o but the number of shards, which Join is given.
func Opts(o Options) Option {
	return func(c *options) { n := c.Shards; *c = o; c.Shards = n }
}

// Target returns the shards the map in force gives m.
func (m *Member) Target() []int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return of(m.target, m.id)
}

// Of and ShardLock are of and shardLock, for the tests of package shards_test.
var (
	Of        = of
	ShardLock = shardLock
)
