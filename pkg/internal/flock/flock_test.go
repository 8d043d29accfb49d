package flock

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestLock: a held lock makes a second Lock wait until its context ends;
// the abandoned wait does not keep the lock once it gets it, so a third
// Lock succeeds after the first is released; the file is 0600.
func TestLock(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.lock")
	unlock, err := LockPerm(context.Background(), path, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("lock file: %v, %v", st, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := LockPerm(ctx, path, 0o600); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock of a held lock = %v, want the deadline", err)
	}
	unlock()
	ctx2, cancel2 := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel2()
	unlock2, err := LockPerm(ctx2, path, 0o600)
	if err != nil {
		t.Fatalf("Lock after release (the abandoned wait must let go): %v", err)
	}
	unlock2()
}

// TestLockRefusesSymlink: the lock file is never opened through a symlink.
func TestLockRefusesSymlink(t *testing.T) {
	dir := t.TempDir()
	if err := os.Symlink(filepath.Join(dir, "target"), filepath.Join(dir, "x.lock")); err != nil {
		t.Fatal(err)
	}
	if _, err := LockPerm(context.Background(), filepath.Join(dir, "x.lock"), 0o600); err == nil {
		t.Fatal("Lock through a symlink succeeded")
	}
}
