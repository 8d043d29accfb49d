//go:build race

package etcdstore

// suiteEvents: under the race detector the embedded etcd is several times
// slower; the bound tests write fewer events (still crossing both bounds).
const suiteEvents = 2000
