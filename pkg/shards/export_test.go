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
	return Of(m.target, m.id)
}
