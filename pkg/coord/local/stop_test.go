package local

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/fence-dev/fence/pkg/coord"
)

// TestLeaseWatchesShareALockFile: two lease watches of one lock in one
// process (two Coordinators on one state directory share an inotify
// instance, and the lock file's watch): when the first ends, the second is
// still told of a stop request at once.
func TestLeaseWatchesShareALockFile(t *testing.T) {
	dir := newDir(t)
	open := func() *coordinator {
		c, err := open(dir)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	c1, c2, op := open(), open(), open()
	l, err := c1.Acquire(tctx(t), "shared", coord.AcquireOptions{TTL: time.Minute, Process: &coord.ProcessInfo{PIDs: []int{os.Getpid()}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx1, cancel1 := context.WithCancel(tctx(t))
	first, err := c1.WatchLease(ctx1, "shared", l.ID)
	if err != nil {
		t.Fatal(err)
	}
	second, err := c2.WatchLease(tctx(t), "shared", l.ID)
	if err != nil {
		t.Fatal(err)
	}
	cancel1()
	for range first {
	}
	if c1.hub != c2.hub || c1.hub.w == nil {
		t.Fatalf("the Coordinators do not share one inotify hub (%p, %p)", c1.hub, c2.hub)
	}
	if _, asked, err := op.RequestStop(tctx(t), "shared", l.Token); err != nil || !asked {
		t.Fatalf("RequestStop = asked %v, %v", asked, err)
	}
	// Without inotify the watch would look again every 200ms: well within
	// this bound too, so inotify is checked for above.
	select {
	case err := <-second:
		if !errors.Is(err, coord.ErrStopRequested) {
			t.Fatalf("the second watch reported %v, want ErrStopRequested", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the second watch was not told of the stop request once the first had ended")
	}
}
