package local

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/internal/atomicfile"
	"github.com/fence-dev/fence/pkg/internal/coordkit"
)

// Limits (coord.Limiter). Every operator limit of the state directory is in
// one file, <state-dir>/limits.json (JSON, written atomically and durably:
// writeLimits), changed under the flock of <state-dir>/limits.lock. A grant reads it under its lock's flock, as
// part of the read-modify-write that issues the token (a missing file is no
// limit; a file that cannot be trusted fails closed). So that no grant
// made with the old limits can complete after SetLimit returns, SetLimit,
// once the file is written, takes and drops the flock of every lock it
// covers whose lock file exists (every lock file under the prefix): a grant
// in progress holds that flock, and any grant that starts later reads the
// new file. A lock that gets its lock file after that listing reads the new
// file too: the lock file is created before its flock is taken and the
// limits read. Then the waiters of each such lock are woken (its state is
// written again): a thaw or a higher limit lets the head of the queue take
// the lock. Waiters read the file at every wake-up; a waiter held back by a
// limit follows neither the holder nor a stall timer, only the lock's state
// and the waiter ahead of it: no polling.

// limitsVersion is the format of limits.json.
const limitsVersion = 1

// maxLimitsSize bounds limits.json.
const maxLimitsSize = 4 << 20

// readFile reads a file of the tree that readers read without a flock
// (limits.json, completion records), named what in messages: nil when it
// does not exist. One that openFile refuses, or unreadable, fails closed.
func (c *coordinator) readFile(what, path string, max int64) ([]byte, error) {
	f, size, err := openFile(c.share, what, path, unix.O_RDONLY, max)
	if f == nil || err != nil {
		return nil, err
	}
	defer f.Close()
	b := make([]byte, size, size+1) // not nil, also when empty
	n, err := f.ReadAt(b, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, unavailable("cannot read %s %s: %v", what, path, err)
	}
	return b[:n], nil
}

type limitsDoc struct {
	Version int           `json:"version"`
	Limits  []coord.Limit `json:"limits"`
}

func (c *coordinator) limitsPath() string { return filepath.Join(c.dir, "limits.json") }

// limitFiles names the limits file and its flock as lockFiles, for
// lockState.
func (c *coordinator) limitFiles() lockFiles {
	return lockFiles{name: "(limits)", base: "limits", state: c.limitsPath(),
		lock: filepath.Join(c.dir, "limits.lock"), temp: filepath.Join(c.dir, tempPrefix+"limits.json"), share: c.share}
}

// readLimits reads every limit in force. A missing file is none.
func (c *coordinator) readLimits() ([]coord.Limit, error) {
	path := c.limitsPath()
	b, err := c.readFile("limits file", path, maxLimitsSize)
	if b == nil || err != nil {
		return nil, err
	}
	var doc limitsDoc
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, unavailable("limits file %s is truncated or corrupt (%v); fence never resets it (its freezes would be lost): repair or remove it by hand", path, err)
	}
	if doc.Version > limitsVersion {
		return nil, unavailable("limits file %s was written by a newer fence (format %d; this fence reads format %d)", path, doc.Version, limitsVersion)
	}
	for _, l := range doc.Limits {
		if err := coord.ValidateLimit(l); err != nil {
			return nil, unavailable("limits file %s holds a bad limit (%v): repair or remove it by hand", path, err)
		}
	}
	return doc.Limits, nil
}

// limitOf is the limit that binds lock name (nil: none).
func (c *coordinator) limitOf(name string) (*coord.Limit, error) {
	ls, err := c.readLimits()
	if err != nil {
		return nil, err
	}
	return coordkit.EffectiveLimit(ls, name), nil
}

// Limits returns every limit in force (coord.Limiter).
func (c *coordinator) Limits(ctx context.Context) ([]coord.Limit, error) {
	if err := c.ready(ctx); err != nil {
		return nil, err
	}
	ls, err := c.readLimits()
	if err != nil {
		return nil, err
	}
	sortLimits(ls)
	return ls, nil
}

func sortLimits(ls []coord.Limit) {
	slices.SortFunc(ls, func(a, b coord.Limit) int {
		if a.Prefix != b.Prefix {
			if a.Prefix {
				return 1
			}
			return -1
		}
		return strings.Compare(a.Name, b.Name)
	})
}

// SetLimit records l (coord.Limiter).
func (c *coordinator) SetLimit(ctx context.Context, l coord.Limit) error {
	if err := coord.ValidateLimit(l); err != nil {
		return err
	}
	if l.At.IsZero() {
		l.At = time.Now()
	}
	l.At = l.At.UTC().Round(0)
	_, _, err := c.putLimit(ctx, l.Name, l.Prefix, &l)
	return err
}

// ClearLimit removes the limit of one scope (coord.Limiter).
func (c *coordinator) ClearLimit(ctx context.Context, name string, prefix bool) (coord.Limit, bool, error) {
	if err := coord.ValidateLimit(coord.Limit{Name: name, Prefix: prefix}); err != nil {
		return coord.Limit{}, false, err
	}
	return c.putLimit(ctx, name, prefix, nil)
}

// putLimit replaces the limit of one scope with l (nil: none) under the
// flock of limits.lock, and returns the one it replaced; then, when
// something changed, it settles the locks the scope covers.
func (c *coordinator) putLimit(ctx context.Context, name string, prefix bool, l *coord.Limit) (old coord.Limit, found bool, err error) {
	lf := c.limitFiles()
	unlock, err := c.lockState(ctx, lf)
	if err != nil {
		return old, false, err
	}
	ls, err := c.readLimits()
	if err == nil {
		i := slices.IndexFunc(ls, func(o coord.Limit) bool { return o.Name == name && o.Prefix == prefix })
		if i >= 0 {
			old, found = ls[i], true
			ls = slices.Delete(ls, i, i+1)
		}
		if l != nil {
			ls = append(ls, *l)
		}
		if l != nil || found {
			err = c.writeLimits(lf, ls)
		}
	}
	unlock()
	if err != nil || l == nil && !found {
		return old, found, err
	}
	return old, found, c.settle(ctx, name, prefix)
}

// writeLimits replaces limits.json with ls; the caller holds its flock.
func (c *coordinator) writeLimits(lf lockFiles, ls []coord.Limit) error {
	sortLimits(ls)
	b, err := json.Marshal(limitsDoc{Version: limitsVersion, Limits: ls})
	if err != nil {
		return unavailable("encode limits: %v", err)
	}
	if _, err := atomicfile.WriteViaPerm(lf.state, lf.temp, append(b, '\n'), true, c.share.FilePerm()); err != nil {
		return unavailable("write limits file %s: %v", lf.state, err)
	}
	return nil
}

// settle waits for the grants in progress on the locks a changed limit
// covers (it takes and drops each one's flock) and wakes their waiters: the
// state of a lock with waiters is written again, which they watch.
func (c *coordinator) settle(ctx context.Context, name string, prefix bool) error {
	fs := []lockFiles{c.files(name)}
	if prefix {
		var err error
		if fs, err = c.listLocks(lockSuffix, name); err != nil {
			return err
		}
	}
	for _, f := range fs {
		if _, err := os.Lstat(f.lock); errors.Is(err, os.ErrNotExist) {
			continue // never used: its first grant reads the new limits
		}
		err := c.update(ctx, f, func(st *state) (stateWrite, error) {
			if len(st.Queue) == 0 || prefix && !strings.HasPrefix(st.Name, name) {
				return noChange, nil
			}
			return rewrite, nil
		})
		if err != nil && (ctx.Err() != nil || errors.Is(err, errClosed)) {
			return err
		} // else a lock that cannot be read grants nothing either
	}
	return nil
}
