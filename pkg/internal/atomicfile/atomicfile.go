// Package atomicfile holds what fence's file-backed stores (the local
// coordinator, the local guard and history stores) share: replacing a file
// atomically and durably, and a reversible file-name escape.
package atomicfile

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// TempPrefix starts the name of every temporary file WritePerm makes, so that
// stores can recognise (and clean up) leftovers of a crash.
const TempPrefix = ".tmp-"

// WritePerm replaces path with data: a temporary file in the same
// directory, with permission perm (set explicitly, whatever the umask),
// fsync, rename over path, and, when syncDir is set, an fsync of the
// directory so that the rename itself is durable. A crash at any instant
// leaves the old or the new content, never a mix. It returns the file's info
// as written (the renamed file keeps its device and inode).
func WritePerm(path string, data []byte, syncDir bool, perm os.FileMode) (os.FileInfo, error) {
	return WriteViaPerm(path, "", data, syncDir, perm)
}

// WriteViaPerm is WritePerm through the temporary file temp, in path's
// directory, for a caller that alone may write temp (it holds a lock that
// every writer of path takes): a file found at temp is a leftover of a
// writer that died before its rename, and is replaced. temp is created
// afresh, never opened through a symbolic link. An empty temp is a new
// random name starting with TempPrefix.
func WriteViaPerm(path, temp string, data []byte, syncDir bool, perm os.FileMode) (os.FileInfo, error) {
	const flags = os.O_WRONLY | os.O_CREATE | os.O_EXCL | syscall.O_NOFOLLOW
	var tmp *os.File
	var err error
	if temp == "" {
		tmp, err = os.CreateTemp(filepath.Dir(path), TempPrefix+"*")
	} else if tmp, err = os.OpenFile(temp, flags, 0o600); errors.Is(err, os.ErrExist) {
		if err := os.Remove(temp); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
		tmp, err = os.OpenFile(temp, flags, 0o600)
	}
	if err != nil {
		return nil, err
	}
	fail := func(err error) (os.FileInfo, error) {
		tmp.Close()
		os.Remove(tmp.Name())
		return nil, err
	}
	if perm != 0o600 {
		if err := tmp.Chmod(perm); err != nil {
			return fail(err)
		}
	}
	if _, err := tmp.Write(data); err != nil {
		return fail(err)
	}
	if err := tmp.Sync(); err != nil {
		return fail(err)
	}
	fi, err := tmp.Stat()
	if err != nil {
		return fail(err)
	}
	if err := tmp.Close(); err != nil {
		return fail(err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		os.Remove(tmp.Name())
		return nil, err
	}
	if syncDir {
		if err := SyncDir(filepath.Dir(path)); err != nil {
			return nil, err
		}
	}
	return fi, nil
}

// SyncDir fsyncs a directory, making the creations, renames and removals in
// it durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// Escape maps s to a string safe as a file name, reversibly: bytes other than
// [A-Za-z0-9._-], and a leading '.', become %XX (upper-case hex). The result
// never contains '/', '~' or '=', and never starts with '.'.
func Escape(s string) string {
	var b strings.Builder
	const hexdig = "0123456789ABCDEF"
	for i := 0; i < len(s); i++ {
		c := s[i]
		if safe(c) && !(i == 0 && c == '.') {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hexdig[c>>4])
		b.WriteByte(hexdig[c&15])
	}
	return b.String()
}

// Unescape reverses Escape; ok is false for a string Escape cannot have
// produced (a bad or lower-case %XX, an unsafe byte, a leading '.'): the
// decoded string must escape back to s.
func Unescape(s string) (string, bool) {
	var b []byte
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+3], 16, 8); err == nil {
				b = append(b, byte(v))
				i += 2
				continue
			}
		}
		b = append(b, s[i])
	}
	return string(b), Escape(string(b)) == s
}

// FileBase is the base of the file names that hold s: Escape(s) when it is
// at most maxLen bytes, else hashPrefix and the hex SHA-256 of s (the real
// s must then be stored in the file). Escape never yields '~' or '=', so
// with one of those as hashPrefix a hashed base is never an escaped one.
// maxLen and hashPrefix are part of a store's layout on disk: a store
// passes its own, always the same.
func FileBase(s string, maxLen int, hashPrefix string) string {
	esc := Escape(s)
	if len(esc) > maxLen {
		sum := sha256.Sum256([]byte(s))
		return hashPrefix + hex.EncodeToString(sum[:])
	}
	return esc
}

func safe(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.'
}
