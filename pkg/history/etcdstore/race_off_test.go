//go:build !race

package etcdstore

const suiteEvents = 10_000
