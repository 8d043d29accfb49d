package local

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/fence-dev/fence/pkg/clock"
	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/internal/atomicfile"
	"github.com/fence-dev/fence/pkg/internal/coordkit"
)

// Completion records (coord.Completer, `fence run --once`).
//
// The records of lock NAME live in once/<base of NAME>/, one JSON file per
// key, named by the key's base (the escape of the key, or "=<sha256>" for a
// long one; the key is inside): <base of KEY>.json, mode 0600 (0660 in a
// group-shared state directory). Every write (Complete, Mark, Forget, and
// the pruning of expired records) is made under the lock's flock, the one
// that its state's read-modify-writes take, and durably (writeRecord), so a
// record is whole or absent, also after a crash or a kill -9, and is on disk
// before Complete returns. Complete checks, under that flock, that the lease
// is still the lock's live holder on the boot clock: a lease that expired,
// was revoked or replaced cannot write a record. Readers read without the
// flock (a rename is atomic). An expired record reads as absent and is
// removed by the lock's next write or listing.

// onceDir is the directory of lock name's completion records.
func (c *coordinator) onceDir(name string) string {
	return filepath.Join(c.dir, "once", fileBase(name))
}

func (c *coordinator) oncePath(name, key string) string {
	return filepath.Join(c.onceDir(name), fileBase(key)+stateSuffix)
}

// Completion returns the record of (lock, key).
func (c *coordinator) Completion(ctx context.Context, lock, key string) (coord.Completion, bool, error) {
	if err := coordkit.CheckOnce(lock, key, 0); err != nil {
		return coord.Completion{}, false, err
	}
	if err := c.ready(ctx); err != nil {
		return coord.Completion{}, false, err
	}
	rec, ok, err := c.readRecord(c.oncePath(lock, key), lock)
	if err != nil || !ok || rec.Key != key {
		return coord.Completion{}, false, err
	}
	if !rec.Expires.IsZero() && !time.Now().Before(rec.Expires) {
		return coord.Completion{}, false, nil
	}
	return rec, true, nil
}

// Complete writes rec under the flock of rec.Lock when leaseID is its live
// holder.
func (c *coordinator) Complete(ctx context.Context, leaseID string, rec coord.Completion, keep time.Duration) error {
	if err := coordkit.CheckOnce(rec.Lock, rec.Key, keep); err != nil {
		return err
	}
	return c.update(ctx, c.files(rec.Lock), func(st *state) (stateWrite, error) {
		if _, err := liveLease(rec.Lock, st, leaseID, clock.Now()); errors.Is(err, coord.ErrLeaseLost) {
			return noChange, fmt.Errorf("%s: cannot record the completion of %q: %w", rec.Lock, rec.Key, err)
		} else if err != nil {
			return noChange, err
		}
		path := c.oncePath(rec.Lock, rec.Key)
		if old, ok, err := c.readRecord(path, rec.Lock); err != nil {
			return noChange, err
		} else if ok && old.Key == rec.Key && (old.Expires.IsZero() || time.Now().Before(old.Expires)) {
			return noChange, nil // marked meanwhile: kept
		}
		return noChange, c.writeRecord(rec, keep)
	})
}

// Mark writes rec without a lease, under the lock's flock.
func (c *coordinator) Mark(ctx context.Context, rec coord.Completion, keep time.Duration) error {
	if err := coordkit.CheckOnce(rec.Lock, rec.Key, keep); err != nil {
		return err
	}
	return c.update(ctx, c.files(rec.Lock), func(*state) (stateWrite, error) {
		return noChange, c.writeRecord(rec, keep)
	})
}

// Forget removes the record of (lock, key).
func (c *coordinator) Forget(ctx context.Context, lock, key string) (bool, error) {
	if err := coordkit.CheckOnce(lock, key, 0); err != nil {
		return false, err
	}
	var removed bool
	err := c.update(ctx, c.files(lock), func(*state) (stateWrite, error) {
		path := c.oncePath(lock, key)
		rec, ok, err := c.readRecord(path, lock)
		switch {
		case err != nil:
			// A record that cannot be read (corrupt, left by hand) is what
			// forget is for: it goes. One that is not a file stays.
			if fi, serr := os.Lstat(path); serr != nil || !fi.Mode().IsRegular() {
				return noChange, err
			}
			rec = coord.Completion{Key: key}
		case !ok || rec.Key != key:
			return noChange, nil
		}
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return noChange, unavailable("lock %q: remove completion record %s: %v", lock, path, err)
		}
		removed = rec.Expires.IsZero() || time.Now().Before(rec.Expires) // an expired one was gone already
		return noChange, atomicfile.SyncDir(filepath.Dir(path))
	})
	return removed, err
}

// Completions lists the lock's live records, sorted by key, and removes the
// expired ones.
func (c *coordinator) Completions(ctx context.Context, lock string) ([]coord.Completion, error) {
	if err := coord.ValidateName(lock); err != nil {
		return nil, err
	}
	if _, err := os.Lstat(c.onceDir(lock)); errors.Is(err, os.ErrNotExist) {
		return nil, c.checkOpen()
	}
	var out []coord.Completion
	err := c.update(ctx, c.files(lock), func(*state) (stateWrite, error) {
		recs, err := c.prune(lock)
		out = recs
		return noChange, err
	})
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, err
}

// prune reads every record of lock, removes the expired ones and returns
// the others. The caller holds the lock's flock.
func (c *coordinator) prune(lock string) ([]coord.Completion, error) {
	dir := c.onceDir(lock)
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, unavailable("lock %q: read completion records %s: %v", lock, dir, err)
	}
	now := time.Now()
	var out []coord.Completion
	removed := false
	for _, e := range ents {
		path := filepath.Join(dir, e.Name())
		if isTempName(e.Name()) {
			os.Remove(path) // left by a writer killed before its rename; we hold the flock
			continue
		}
		if !strings.HasSuffix(e.Name(), stateSuffix) {
			continue
		}
		rec, ok, err := c.readRecord(path, lock)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		if !rec.Expires.IsZero() && !now.Before(rec.Expires) {
			os.Remove(path)
			removed = true
			continue
		}
		out = append(out, rec)
	}
	if removed {
		_ = atomicfile.SyncDir(dir)
	}
	return out, nil
}

// writeRecord writes rec durably (temporary file .tmp~<base of KEY>, fsync,
// rename, directory fsync) and prunes the lock's expired records. The
// caller holds the lock's flock.
func (c *coordinator) writeRecord(rec coord.Completion, keep time.Duration) error {
	rec, _ = coordkit.Stamp(rec, keep)
	dir := c.onceDir(rec.Lock)
	if err := ensureDirs(c.share, filepath.Dir(dir), dir); err != nil {
		return err
	}
	b, err := json.Marshal(rec)
	if err != nil {
		return unavailable("lock %q: encode completion record: %v", rec.Lock, err)
	}
	kb := fileBase(rec.Key)
	path := filepath.Join(dir, kb+stateSuffix)
	if _, err := atomicfile.WriteViaPerm(path, filepath.Join(dir, tempPrefix+kb), append(b, '\n'), true, c.share.FilePerm()); err != nil {
		return unavailable("lock %q: write completion record %s: %v", rec.Lock, path, err)
	}
	_, err = c.prune(rec.Lock)
	return err
}

// readRecord reads one record file; ok is false when it does not exist. A
// record that cannot be trusted (not a regular file of ours, not JSON, of
// another lock) fails closed.
func (c *coordinator) readRecord(path, lock string) (coord.Completion, bool, error) {
	b, err := c.readFile(fmt.Sprintf("lock %q: completion record", lock), path, 1<<20)
	if b == nil || err != nil {
		return coord.Completion{}, false, err
	}
	var rec coord.Completion
	if err := json.Unmarshal(b, &rec); err != nil {
		return coord.Completion{}, false, unavailable("lock %q: completion record %s is corrupt (%v); remove it with fence once forget or by hand", lock, path, err)
	}
	if rec.Lock != lock || coord.ValidateKey(rec.Key) != nil {
		return coord.Completion{}, false, unavailable("lock %q: completion record %s belongs to lock %q, key %q", lock, path, rec.Lock, rec.Key)
	}
	return rec, true, nil
}
