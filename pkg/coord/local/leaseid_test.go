package local

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/fence-dev/fence/pkg/coord"
)

// TestLeaseIDs: a lease id carries its lock's tag, so that the id of
// another lock's lease is refused (ErrInvalid) even once that lease is gone;
// 16 digits without a tag (fences before it; also the form of an etcd
// lease id) that are no lease's are refused too; anything else is
// malformed.
func TestLeaseIDs(t *testing.T) {
	c := openTB(t, newDir(t))
	long := strings.Repeat("n", coord.MaxNameLen) // a hashed state file name
	for _, name := range []string{"a", "a/b", long} {
		l := acquire(t, c, name, coord.AcquireOptions{})
		if len(l.ID) != leaseIDLen || strings.Trim(l.ID, "0123456789abcdef") != "" || !strings.HasPrefix(l.ID, nameTag(name)) {
			t.Fatalf("lease id %q of %q: want %d hex digits starting with its tag %s", l.ID, name, leaseIDLen, nameTag(name))
		}
		if _, err := c.Renew(tctx(t), name, l.ID); err != nil {
			t.Fatalf("Renew(%q): %v", name, err)
		}
		release(t, c, l)
		// Gone: 0 and ErrLeaseLost on its own lock, ErrInvalid on another.
		if err := c.Release(tctx(t), name, l.ID); err != nil {
			t.Errorf("Release of a released lease: %v", err)
		}
		if _, err := c.Renew(tctx(t), name, l.ID); !errors.Is(err, coord.ErrLeaseLost) {
			t.Errorf("Renew of a released lease = %v, want ErrLeaseLost", err)
		}
		for _, other := range []string{"c", "x" + name[1:]} {
			if err := c.Release(tctx(t), other, l.ID); !errors.Is(err, coord.ErrInvalid) || !strings.Contains(err.Error(), "belongs to another lock") {
				t.Errorf("Release(%q, id of a lease of %q) = %v, want ErrInvalid", other, name, err)
			}
			if _, err := c.Renew(tctx(t), other, l.ID); !errors.Is(err, coord.ErrInvalid) || errors.Is(err, coord.ErrLeaseLost) {
				t.Errorf("Renew(%q, id of a lease of %q) = %v, want ErrInvalid", other, name, err)
			}
		}
	}
	// 16 digits, the form of an etcd lease id, found on no lease: not this
	// coordinator's (a free lock, a held one, one never used).
	held := acquire(t, c, "held", coord.AcquireOptions{})
	const untagged = "694d8a1b2c3d4e5f"
	for _, name := range []string{"a", "held", "never-used"} {
		for op, call := range map[string]func() error{
			"Renew": func() error {
				_, err := c.Renew(tctx(t), name, untagged)
				return err
			},
			"Release": func() error { return c.Release(tctx(t), name, untagged) },
			"AttachProcess": func() error {
				return c.AttachProcess(tctx(t), name, untagged, coord.ProcessInfo{PIDs: []int{os.Getpid()}})
			},
		} {
			if err := call(); !errors.Is(err, coord.ErrInvalid) || errors.Is(err, coord.ErrLeaseLost) || !strings.Contains(err.Error(), "etcd lease id") {
				t.Errorf("%s(%q) with an untagged id = %v, want ErrInvalid naming etcd", op, name, err)
			}
		}
	}
	release(t, c, held)
	for _, id := range []string{"0123456789ABCDEF", nameTag("a") + "0123456789ABCDEF", "0123456789abcde", nameTag("a") + "0123456789abcdef0", "zz!"} {
		if err := c.Release(tctx(t), "a", id); !errors.Is(err, coord.ErrInvalid) || !strings.Contains(err.Error(), "is not a lease id") {
			t.Errorf("Release(%q) = %v, want ErrInvalid", id, err)
		}
	}
}
