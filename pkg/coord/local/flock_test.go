package local

import (
	"context"
	"errors"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fence-dev/fence/pkg/coord"
)

// TestContendedFlockGivesUp: an update that waits for a lock's flock held
// elsewhere ends with its ctx (ctx.Err()) and with the coordinator's Close
// (ErrUnavailable), and takes the flock once it is free.
func TestContendedFlockGivesUp(t *testing.T) {
	c, err := open(newDir(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	l, err := c.Acquire(tctx(t), "a", coord.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	fd, err := unix.Open(c.files("a").lock, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.Flock(fd, unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := c.Renew(ctx, "a", l.ID); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Renew while the flock is held elsewhere = %v, want its ctx's deadline", err)
	}
	done := make(chan error, 1)
	go func() { _, err := c.Renew(tctx(t), "a", l.ID); done <- err }()
	time.Sleep(50 * time.Millisecond)
	if err := unix.Flock(fd, unix.LOCK_UN); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("Renew once the flock is free = %v", err)
	}
	if err := unix.Flock(fd, unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	go func() { _, err := c.Renew(tctx(t), "a", l.ID); done <- err }()
	time.Sleep(50 * time.Millisecond)
	c.Close()
	select {
	case err := <-done:
		if !errors.Is(err, coord.ErrUnavailable) || !errors.Is(err, errClosed) {
			t.Fatalf("Renew waiting for the flock when the coordinator closed = %v, want errClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Renew still waiting for the flock 5s after Close")
	}
}
