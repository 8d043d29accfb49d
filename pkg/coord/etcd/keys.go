package etcd

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fence-dev/fence/pkg/coord"
)

// locksKey is "<prefix>locks/" followed by the escape of a name or of a name
// prefix.
func (c *coordinator) locksKey(namePrefix string) string {
	return c.prefix + "locks/" + url.PathEscape(namePrefix)
}

// lockRange is the prefix of every key of lock name.
func (c *coordinator) lockRange(name string) string { return c.locksKey(name) + "/" }

// leaseKey is the key of one lease on lock name.
func (c *coordinator) leaseKey(name string, id clientv3.LeaseID) string {
	return c.lockRange(name) + formatID(id)
}

// parseKey returns the lock name of a key under <prefix>locks/, and false
// for keys that fence did not write.
func (c *coordinator) parseKey(key string) (string, bool) {
	rest, ok := strings.CutPrefix(key, c.prefix+"locks/")
	if !ok {
		return "", false
	}
	i := strings.LastIndexByte(rest, '/')
	if i < 0 || strings.IndexByte(rest[:i], '/') >= 0 {
		return "", false
	}
	name, err := url.PathUnescape(rest[:i])
	if err != nil || coord.ValidateName(name) != nil {
		return "", false
	}
	return name, true
}

// formatID writes a lease id as fence shows it: lower-case hex, as etcdctl.
func formatID(id clientv3.LeaseID) string { return strconv.FormatUint(uint64(id), 16) }

// parseID reads a lease id written by formatID.
func parseID(s string) (clientv3.LeaseID, error) {
	v, err := strconv.ParseUint(s, 16, 63)
	if err != nil || v == 0 {
		if len(s) == 24 && strings.Trim(s, "0123456789abcdef") == "" {
			return 0, fmt.Errorf("%w: lease id %q is not an etcd lease id (hex, at most 16 digits) but the form of the local coordinator's: give the coordinator that took the lease (--state-dir, without --endpoints, for the local one)", coord.ErrInvalid, s)
		}
		return 0, fmt.Errorf("%w: lease id %q is not an etcd lease id (hex)", coord.ErrInvalid, s)
	}
	return clientv3.LeaseID(v), nil
}

// tokenOf is the fencing token of a key created at revision rev. etcd
// revisions are positive int64s, so a token is at most coord.MaxToken by
// construction; anything else (which etcd never sends) is refused rather
// than turned into token 0 or a wrapped one.
func tokenOf(name string, rev int64) (uint64, error) {
	if rev <= 0 {
		return 0, fmt.Errorf("%w: lock %q: etcd reported revision %d for its holder's key: no token can be issued", coord.ErrUnavailable, name, rev)
	}
	return uint64(rev), nil
}

// meta is the JSON value of a lease's key.
type meta struct {
	Holder string `json:"holder"`
	// TTL is the requested TTL ("15s"); the granted one is the lease's.
	TTL string `json:"ttl"`
	// AcquiredAt is set once the lease holds the lock.
	AcquiredAt *time.Time `json:"acquired_at,omitempty"`
	// QueuedAt is set while the lease waits for the lock.
	QueuedAt *time.Time `json:"queued_at,omitempty"`
	// Supervised: the lease was acquired with AcquireOptions.Process (fence
	// run), whose supervisor watches this key and answers a stop request.
	Supervised bool `json:"supervised,omitempty"`
	// StopRequestedAt is set by RequestStop: the holder is asked to stop and
	// release. It lives on this key, which goes with the holding, so an ask
	// never reaches a later holder.
	StopRequestedAt *time.Time `json:"stop_requested_at,omitempty"`
	// HeldBack is set by the first waiter while an operator limit holds
	// the lock back (limits.go): it has not claimed the lock, and readers
	// do not take it for the holder. Its claim replaces the value.
	HeldBack bool `json:"held_back,omitempty"`
	// Slots is the semaphore's slots (slots.go; absent for a lock) and
	// Slot the holder's slot.
	Slots int `json:"slots,omitempty"`
	Slot  int `json:"slot,omitempty"`
}

func (m meta) encode() string {
	b, err := json.Marshal(m)
	if err != nil {
		panic(err) // strings and times always marshal
	}
	return string(b)
}

// decodeMeta reads a key's value; a value that is not fence's reads as an
// unknown holder rather than failing every read of the lock.
func decodeMeta(v []byte) meta {
	var m meta
	if json.Unmarshal(v, &m) != nil {
		return meta{Holder: "?"}
	}
	return m
}
