package local

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/internal/atomicfile"
)

// TestEveryGrantIsDurable: the package's durability rule. Every grant
// replaces the state (fsynced, renamed: atomicfile.WriteViaPerm) and fsyncs
// locks/ before Acquire returns its lease, whatever the file system; the
// queue's changes do not fsync the directory (a waiter is not worth keeping
// across a crash). Tokens grow by one.
func TestEveryGrantIsDurable(t *testing.T) {
	c := openTB(t, newDir(t))
	synced := 0
	syncDir = func(dir string) error {
		if dir == c.locksDir {
			synced++
		}
		return atomicfile.SyncDir(dir)
	}
	t.Cleanup(func() { syncDir = atomicfile.SyncDir })
	ctx := tctx(t)
	var last uint64
	for i := range 6 {
		before := synced
		l, err := c.Acquire(ctx, "job", coord.AcquireOptions{TTL: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if synced != before+1 {
			t.Fatalf("grant %d synced locks/ %d times before it returned, want once", i+1, synced-before)
		}
		if l.Token != last+1 {
			t.Fatalf("token %d after %d", l.Token, last)
		}
		last = l.Token
		if err := c.Release(ctx, "job", l.ID); err != nil {
			t.Fatal(err)
		}
	}
}

// TestCrashCutStateFailsClosed: a state file that a crash (or anything
// else) left empty, zeroed or cut short is never read as a lower token, nor
// as a fresh lock: Acquire and Inspect refuse it (ErrUnavailable, naming the
// state file), and the file is left as it is.
func TestCrashCutStateFailsClosed(t *testing.T) {
	damages := map[string]func([]byte) []byte{
		"empty": func([]byte) []byte { return nil },
		"zeros": func(b []byte) []byte { return make([]byte, len(b)) },
		"cut":   func(b []byte) []byte { return b[:len(b)/2] },
	}
	for name, damage := range damages {
		t.Run(name, func(t *testing.T) {
			c := openTB(t, newDir(t))
			for range 3 {
				release(t, c, acquire(t, c, "job", coord.AcquireOptions{TTL: 10 * time.Second}))
			}
			path := c.StateFile("job")
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			cut := damage(b)
			if err := os.WriteFile(path, cut, 0o600); err != nil {
				t.Fatal(err)
			}
			l, err := c.Acquire(tctx(t), "job", coord.AcquireOptions{TTL: 10 * time.Second})
			if err == nil || !errors.Is(err, coord.ErrUnavailable) || !strings.Contains(err.Error(), "state file") {
				t.Fatalf("Acquire of a damaged state = %v, %v; want it refused (fail closed)", l, err)
			}
			if li, err := c.Inspect(tctx(t), "job"); err == nil {
				t.Fatalf("Inspect of a damaged state = %+v, want an error", li)
			}
			if after, _ := os.ReadFile(path); string(after) != string(cut) {
				t.Fatal("the damaged state file was changed")
			}
		})
	}
}
