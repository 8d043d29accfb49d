// Package flock takes an exclusive flock(2) on a lock file, with a context
// that can abandon the wait. The local coordinator and the local guard and
// history stores lock their files with it.
package flock

import (
	"context"
	"errors"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// LockPerm opens (creating it with permission perm, set explicitly whatever
// the umask: 0660 in a group-shared state directory; never through a
// symlink) the lock file at path and takes its exclusive flock (Take).
// unlock releases the lock and closes the file.
func LockPerm(ctx context.Context, path string, perm os.FileMode) (unlock func(), err error) {
	_, statErr := os.Lstat(path)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, err
	}
	if perm != 0o600 && errors.Is(statErr, os.ErrNotExist) {
		// Created here, unless another process got there first: then it
		// is that process's to set.
		var st unix.Stat_t
		if unix.Fstat(int(f.Fd()), &st) == nil && int(st.Uid) == os.Geteuid() && uint32(st.Mode)&0o777 != uint32(perm) {
			if err := f.Chmod(perm); err != nil {
				f.Close()
				return nil, err
			}
		}
	}
	if err := Take(ctx, f); err != nil {
		return nil, err
	}
	return func() { _ = unix.Flock(int(f.Fd()), unix.LOCK_UN); f.Close() }, nil
}

// Take takes the exclusive flock of the open file f. An uncontended lock is
// taken at once; otherwise the blocking flock runs in a goroutine, so that
// ctx can abandon the wait (Take then returns ctx.Err(), and a lock obtained
// after that is released at once). On error f is closed (once no flock
// call uses it any more); else closing it releases the lock.
func Take(ctx context.Context, f *os.File) error {
	fd := int(f.Fd())
	if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err == nil {
		return nil
	} else if !errors.Is(err, unix.EWOULDBLOCK) {
		f.Close()
		return &os.PathError{Op: "flock", Path: f.Name(), Err: err}
	}
	// Unbuffered: the goroutine hands the result over only to a waiting
	// receiver; once abandon is closed it releases the lock itself.
	done := make(chan error)
	abandon := make(chan struct{})
	go func() {
		var err error
		for {
			err = unix.Flock(fd, unix.LOCK_EX)
			if !errors.Is(err, unix.EINTR) {
				break
			}
		}
		select {
		case done <- err:
		case <-abandon:
			if err == nil {
				_ = unix.Flock(fd, unix.LOCK_UN)
			}
			f.Close()
		}
	}()
	select {
	case err := <-done:
		if err != nil {
			f.Close()
			return &os.PathError{Op: "flock", Path: f.Name(), Err: err}
		}
		return nil
	case <-ctx.Done():
		close(abandon)
		return ctx.Err()
	}
}
