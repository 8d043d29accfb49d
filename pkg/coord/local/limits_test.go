package local

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fence-dev/fence/pkg/coord"
)

// TestSetLimitWaitsForGrantInProgress: a grant in progress holds its
// lock's flock; SetLimit (of the lock, or of a prefix that covers it) does
// not return before that flock is dropped, so the grant, which read the
// old limits, completes before SetLimit returns.
func TestSetLimitWaitsForGrantInProgress(t *testing.T) {
	for _, prefix := range []bool{false, true} {
		dir := newDir(t)
		c, err := open(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		l, err := c.Acquire(tctx(t), "jobs/a", coord.AcquireOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Release(tctx(t), "jobs/a", l.ID); err != nil {
			t.Fatal(err)
		}
		fd, err := unix.Open(c.files("jobs/a").lock, unix.O_RDWR|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := unix.Flock(fd, unix.LOCK_EX); err != nil {
			t.Fatal(err)
		}
		name := "jobs/a"
		if prefix {
			name = "jobs/"
		}
		done := make(chan error, 1)
		go func() { done <- c.SetLimit(context.Background(), coord.Limit{Name: name, Prefix: prefix}) }()
		select {
		case err := <-done:
			t.Fatalf("prefix %v: SetLimit returned (%v) while a grant of the lock held its flock", prefix, err)
		case <-time.After(300 * time.Millisecond):
		}
		unix.Close(fd)
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("prefix %v: SetLimit still waiting 10s after the flock was dropped", prefix)
		}
	}
}

// TestLimitsFileFailsClosed: a limits file that cannot be read refuses
// grants (and says which file) rather than granting without the limits.
func TestLimitsFileFailsClosed(t *testing.T) {
	dir := newDir(t)
	c, err := open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := os.WriteFile(filepath.Join(dir, "limits.json"), []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = c.Acquire(tctx(t), "x", coord.AcquireOptions{})
	if !errors.Is(err, coord.ErrUnavailable) || !strings.Contains(err.Error(), "limits.json") {
		t.Fatalf("Acquire with a corrupt limits file: %v; want ErrUnavailable naming limits.json", err)
	}
}
