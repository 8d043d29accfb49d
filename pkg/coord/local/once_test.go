package local

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/fence-dev/fence/pkg/coord"
)

// TestOnceRecordFailsClosed: a completion record that cannot be read makes
// Completion fail (ErrUnavailable: fence run --once exits 125 rather than run
// the job again), and Forget removes it. Records are 0600 files.
func TestOnceRecordFailsClosed(t *testing.T) {
	c := openTB(t, newDir(t))
	ctx := context.Background()
	if err := c.Mark(ctx, coord.Completion{Lock: "j", Key: "k", Holder: "h"}, time.Hour); err != nil {
		t.Fatal(err)
	}
	path := c.oncePath("j", "k")
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("record file %s: %v, %v; want mode 0600", path, fi.Mode(), err)
	}
	if err := os.WriteFile(path, []byte(`{"lock":"j","ke`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.Completion(ctx, "j", "k"); !errors.Is(err, coord.ErrUnavailable) {
		t.Fatalf("Completion of a truncated record = %v, want ErrUnavailable", err)
	}
	if removed, err := c.Forget(ctx, "j", "k"); err != nil || !removed {
		t.Fatalf("Forget of a truncated record = %v, %v; want removed", removed, err)
	}
	if _, ok, err := c.Completion(ctx, "j", "k"); err != nil || ok {
		t.Fatalf("after Forget: ok %v, %v", ok, err)
	}
}
