// Package localstore is the guard store of fence's local backend: one JSON
// file per key under <state-dir>/guards/.
//
// A write takes an exclusive flock on the key's sibling lock file for the
// read-modify-write only, compares the stored token, and replaces the value
// file atomically (temp file, fsync, rename, fsync of the directory): a crash
// leaves the old or the new value, never a mix, and Put returns only once the
// new value is durable. A corrupt, truncated or symlinked value file is an
// error wrapping coord.ErrUnavailable, and a write never replaces it (it fails
// closed). Reads take no lock.
//
// Many processes on one host may share a store.
package localstore

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/guard"
	"github.com/fence-dev/fence/pkg/guard/internal/check"

	"github.com/fence-dev/fence/internal/sharedir"
	"github.com/fence-dev/fence/pkg/internal/atomicfile"
	"github.com/fence-dev/fence/pkg/internal/flock"
)

// dirName is the name of the store's directory inside the state directory.
const dirName = "guards"

// maxEscaped is the longest escaped key used as a file name; longer escapes
// use a SHA-256 name (the key is stored inside the file either way).
const maxEscaped = 200

// maxFileSize bounds what Get reads, so that a wrong file cannot exhaust
// memory.
const maxFileSize = 1 << 30

// store is a guard.Guard on files under <state-dir>/guards/.
type store struct {
	dir   string
	share sharedir.Mode // how the state directory is shared
}

var _ guard.Guard = (*store)(nil)

// Open opens the store under stateDir, creating stateDir (0700) and its
// guards/ directory (0700) when missing. It fails when guards/ is a symlink
// or not a directory.
func Open(stateDir string) (guard.Guard, error) {
	if stateDir == "" {
		return nil, fmt.Errorf("%w: empty state directory", coord.ErrInvalid)
	}
	dir := filepath.Join(stateDir, dirName)
	share, err := sharedir.OfSubdir(dir)
	if err != nil {
		return nil, fmt.Errorf("%w: guard store: %w", coord.ErrUnavailable, err)
	}
	return &store{dir: dir, share: share}, nil
}

// record is the on-disk form of a value.
type record struct {
	Version   int       `json:"version"`
	Key       string    `json:"key"`
	Token     uint64    `json:"token"`
	Data      []byte    `json:"data"`
	UpdatedAt time.Time `json:"updated_at"`
}

// Put implements guard.Guard.
func (s *store) Put(ctx context.Context, key string, token uint64, value []byte) error {
	if err := check.Put(key, token); err != nil {
		return err
	}
	base := fileBase(key)
	// The exclusive flock of the key's lock file (internal/flock: ctx can
	// abandon the wait) covers the read-modify-write.
	unlock, err := flock.LockPerm(ctx, filepath.Join(s.dir, base+".lock"), s.share.FilePerm())
	switch {
	case err != nil && ctx.Err() != nil && errors.Is(err, ctx.Err()):
		return err
	case err != nil:
		return fmt.Errorf("%w: guard lock: %w", coord.ErrUnavailable, err)
	}
	defer unlock()

	cur, err := s.read(key, base)
	switch {
	case errors.Is(err, guard.ErrNotFound):
	case err != nil:
		return err
	case cur.Token > token:
		return &guard.StaleError{Key: key, Token: token, Accepted: cur.Token}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	rec := record{Version: 1, Key: key, Token: token, Data: value, UpdatedAt: time.Now().UTC()}
	if rec.Data == nil {
		rec.Data = []byte{}
	}
	buf, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	// Durably: atomicfile.WritePerm with a directory fsync.
	if _, err := atomicfile.WritePerm(filepath.Join(s.dir, base+".json"), append(buf, '\n'), true, s.share.FilePerm()); err != nil {
		return fmt.Errorf("%w: guard %q: %w", coord.ErrUnavailable, key, err)
	}
	return nil
}

// Get implements guard.Guard.
func (s *store) Get(ctx context.Context, key string) (guard.Value, error) {
	if err := guard.ValidateKey(key); err != nil {
		return guard.Value{}, err
	}
	if err := ctx.Err(); err != nil {
		return guard.Value{}, err
	}
	rec, err := s.read(key, fileBase(key))
	if err != nil {
		return guard.Value{}, err
	}
	return guard.Value{Data: rec.Data, Token: rec.Token, UpdatedAt: rec.UpdatedAt}, nil
}

// read reads and checks the value file of key; guard.ErrNotFound when absent.
func (s *store) read(key, base string) (record, error) {
	path := filepath.Join(s.dir, base+".json")
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return record{}, fmt.Errorf("%w: %q", guard.ErrNotFound, key)
	}
	if err != nil {
		if errors.Is(err, syscall.ELOOP) {
			err = fmt.Errorf("%s is a symlink", path)
		}
		return record{}, fmt.Errorf("%w: guard %q: %w", coord.ErrUnavailable, key, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return record{}, fmt.Errorf("%w: guard %q: %w", coord.ErrUnavailable, key, err)
	}
	if !fi.Mode().IsRegular() {
		return record{}, fmt.Errorf("%w: guard %q: %s is not a regular file", coord.ErrUnavailable, key, path)
	}
	buf, err := io.ReadAll(io.LimitReader(f, maxFileSize+1))
	if err != nil {
		return record{}, fmt.Errorf("%w: guard %q: %w", coord.ErrUnavailable, key, err)
	}
	corrupt := func(why string) (record, error) {
		return record{}, fmt.Errorf("%w: guard %q: corrupt value file %s (%s); refusing to read or overwrite it",
			coord.ErrUnavailable, key, path, why)
	}
	if len(buf) > maxFileSize {
		return corrupt("too large")
	}
	var rec record
	dec := json.NewDecoder(bytes.NewReader(buf))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rec); err != nil {
		return corrupt(err.Error())
	}
	if dec.More() {
		return corrupt("trailing data")
	}
	switch {
	case rec.Version != 1:
		return corrupt(fmt.Sprintf("unknown version %d", rec.Version))
	case rec.Key != key:
		return corrupt(fmt.Sprintf("it holds key %q", rec.Key))
	case check.Token(rec.Token) != nil:
		return corrupt(fmt.Sprintf("invalid token %d", rec.Token))
	}
	return rec, nil
}

// fileBase names a key's files: a reversible escape (bytes other than
// [A-Za-z0-9_.-] as %XX, and a leading '.' as %2E) or, when that would be
// longer than maxEscaped, "~" and the SHA-256 of the key ('~' never appears
// in an escape, so the two forms cannot collide). The key is stored in the
// file and checked on every read.
func fileBase(key string) string { return atomicfile.FileBase(key, maxEscaped, "~") }
