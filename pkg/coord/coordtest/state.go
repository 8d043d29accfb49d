package coordtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fence-dev/fence/pkg/coord"
)

// fileSnapshot is what a state file is on disk: its mode and its content or
// link target.
func fileSnapshot(t testing.TB, path string) string {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		return "missing: " + err.Error()
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		target, err := os.Readlink(path)
		if err != nil {
			t.Fatal(err)
		}
		return fmt.Sprintf("%v -> %s", fi.Mode(), target)
	}
	if !fi.Mode().IsRegular() {
		return fi.Mode().String() // a FIFO: reading would block
	}
	b, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, fs.ErrPermission) {
		t.Fatal(err)
	}
	if err != nil {
		// Unreadable to us: compare size and mtime only.
		return fmt.Sprintf("%v %d bytes %v", fi.Mode(), fi.Size(), fi.ModTime())
	}
	return fmt.Sprintf("%v %q", fi.Mode(), b)
}

// corruptState: a corrupt, truncated, empty, symlinked or unreadable state
// file (garbage, half a file, JSON of something else, a symlink to a good
// copy, a FIFO, a directory, mode 000) is ErrUnavailable from every call, is left as it is, and never resets
// the lock's tokens.
func (s *suite) corruptState(t *testing.T) {
	if s.h.StateFile == nil {
		t.Skip("the backend has no state files")
	}
	name := s.name(t, "corrupt")
	c := s.client(t)
	var last uint64
	for i := 0; i < 3; i++ {
		l := acquire(t, c, name, coord.AcquireOptions{Holder: "before", Wait: 0})
		last = l.Token
		release(t, c, l)
	}
	path := s.h.StateFile(t, name)
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o600 {
		t.Errorf("state file %s has mode %v, want a regular file with 0600", path, fi.Mode())
	}
	if di, err := os.Stat(filepath.Dir(path)); err != nil {
		t.Fatal(err)
	} else if di.Mode().Perm() != 0o700 {
		t.Errorf("state file directory %s has mode %v, want 0700", filepath.Dir(path), di.Mode().Perm())
	}
	orig, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	restore := func() {
		t.Helper()
		tmp := path + ".coordtest"
		if err := os.WriteFile(tmp, orig, 0o600); err != nil {
			t.Fatal(err)
		}
		if fi, err := os.Lstat(path); err == nil && fi.IsDir() {
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	write := func(b []byte) func(t *testing.T) {
		return func(t *testing.T) {
			if err := os.WriteFile(path, b, 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	variants := []struct {
		name    string
		corrupt func(t *testing.T)
	}{
		{"garbage", write([]byte("this is not a state file \x00\xff{"))},
		{"truncated", write(orig[:len(orig)/2])},
		{"empty", write(nil)},
		{"foreign-json", write([]byte(`{"no":"fields of a lock state"}`))},
		{"symlink", func(t *testing.T) {
			// A symlink to a perfectly good copy: still refused.
			cp := filepath.Join(t.TempDir(), "state")
			if err := os.WriteFile(cp, orig, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(cp, path); err != nil {
				t.Fatal(err)
			}
		}},
		{"fifo", func(t *testing.T) {
			// A named pipe: opening it to read must not hang the caller.
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
			if err := syscall.Mkfifo(path, 0o600); err != nil {
				t.Fatal(err)
			}
		}},
		{"directory", func(t *testing.T) {
			// Unreadable as a file, also to root.
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
			if err := os.Mkdir(path, 0o700); err != nil {
				t.Fatal(err)
			}
		}},
		{"unreadable", func(t *testing.T) {
			if os.Geteuid() == 0 {
				t.Skip("root reads files whatever their mode")
			}
			if err := os.Chmod(path, 0); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			defer restore()
			v.corrupt(t)
			before := fileSnapshot(t, path)
			c2 := s.client(t) // as a process that starts now
			for _, cl := range []coord.Coordinator{c, c2} {
				cx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				check := func(what string, err error) {
					t.Helper()
					if !errors.Is(err, coord.ErrUnavailable) {
						t.Errorf("%s with a %s state file = %v, want ErrUnavailable", what, v.name, err)
					} else if strings.Contains(err.Error(), "\n") {
						t.Errorf("%s error spans lines: %q", what, err)
					}
				}
				_, err := cl.Inspect(cx, name)
				check("Inspect", err)
				l, err := cl.Acquire(cx, name, coord.AcquireOptions{TTL: time.Minute, Wait: 0})
				check("Acquire(no wait)", err)
				if l != nil {
					t.Errorf("Acquire over a %s state file granted token %d (last was %d)", v.name, l.Token, last)
				}
				_, err = cl.Acquire(cx, name, coord.AcquireOptions{TTL: time.Minute, Wait: coord.WaitForever})
				check("Acquire(wait)", err)
				_, err = cl.Revoke(cx, name)
				check("Revoke", err)
				cancel()
			}
			if after := fileSnapshot(t, path); after != before {
				t.Errorf("the %s state file was changed:\nbefore %s\nafter  %s", v.name, before, after)
			}
		})
	}
	if got, _ := os.ReadFile(path); !bytes.Equal(got, orig) {
		t.Fatalf("test bug: state file not restored")
	}
	l := acquire(t, s.client(t), name, coord.AcquireOptions{Holder: "after", Wait: 0})
	if l.Token <= last {
		t.Errorf("after the state file was restored: token %d, last before was %d", l.Token, last)
	}
	release(t, c, l)
}
