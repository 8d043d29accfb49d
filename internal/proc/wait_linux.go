package proc

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// WaitExit blocks until the process id has exited (or was already gone) and
// returns nil, or returns ctx.Err() when ctx ends first. It works for any
// process, not only children: it waits on a pidfd through the Go runtime's
// poller, with no polling loop and no thread blocked.
func WaitExit(ctx context.Context, id ID) error {
	f, err := openPidfd(id)
	if err != nil {
		if errors.Is(err, ErrNoProcess) {
			return nil
		}
		return err
	}
	if f == nil {
		return nil
	}
	defer f.Close()
	return waitReadable(ctx, f)
}

// WaitAny blocks until one of ids has exited and returns it, or returns
// ctx.Err() when ctx ends first. With no ids it waits for ctx.
func WaitAny(ctx context.Context, ids ...ID) (ID, error) {
	files := make([]*os.File, 0, len(ids))
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	for _, id := range ids {
		f, err := openPidfd(id)
		if errors.Is(err, ErrNoProcess) || (err == nil && f == nil) {
			return id, nil
		}
		if err != nil {
			return ID{}, err
		}
		files = append(files, f)
	}
	if len(files) == 0 {
		<-ctx.Done()
		return ID{}, ctx.Err()
	}
	if len(files) == 1 {
		if err := waitReadable(ctx, files[0]); err != nil {
			return ID{}, err
		}
		return ids[0], nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	first := make(chan int, len(files))
	var wg sync.WaitGroup
	for i, f := range files {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if waitReadable(ctx, f) == nil {
				first <- i
			}
		}()
	}
	var (
		got = -1
		err error
	)
	select {
	case got = <-first:
	case <-ctx.Done():
		err = ctx.Err()
	}
	cancel()
	wg.Wait()
	if got < 0 {
		select {
		case got = <-first: // exited just as ctx ended: report the exit
			err = nil
		default:
			return ID{}, err
		}
	}
	return ids[got], nil
}

// openPidfd opens a pidfd for id, registered with the runtime poller. It
// returns (nil, nil) or an ErrNoProcess error when id is already gone
// (including a PID now used by another process).
func openPidfd(id ID) (*os.File, error) {
	if id.PID <= 0 || id.Start == 0 {
		return nil, fmt.Errorf("process %v: %w", id, ErrNoProcess)
	}
	fd, err := unix.PidfdOpen(id.PID, unix.PIDFD_NONBLOCK)
	if err != nil {
		if errors.Is(err, unix.ESRCH) {
			return nil, fmt.Errorf("process %v: %w", id, ErrNoProcess)
		}
		return nil, fmt.Errorf("pidfd_open %d: %w", id.PID, err)
	}
	// The pidfd refers to whatever process had the PID when it was opened.
	// Checking the start time after opening makes sure it is ours: if ours
	// had exited and the PID was reused before the open, the start differs.
	if st, err := ReadStat(id.PID); err != nil || st.Start != id.Start {
		unix.Close(fd)
		return nil, nil
	}
	return os.NewFile(uintptr(fd), "pidfd"), nil
}

// waitReadable waits until the pidfd f polls readable (the process exited).
func waitReadable(ctx context.Context, f *os.File) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	stop := context.AfterFunc(ctx, func() { f.SetReadDeadline(time.Unix(1, 0)) })
	defer stop()
	var perr error
	err = rc.Read(func(fd uintptr) bool {
		for {
			pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
			n, err := unix.Poll(pfd, 0)
			if errors.Is(err, unix.EINTR) {
				continue
			}
			if err != nil {
				perr = err
				return true
			}
			return n > 0
		}
	})
	if errors.Is(err, os.ErrDeadlineExceeded) {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return err
	}
	if err != nil {
		return err
	}
	if perr != nil {
		return fmt.Errorf("poll pidfd: %w", perr)
	}
	return nil
}
