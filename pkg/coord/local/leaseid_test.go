package local

import (
	"errors"
	"strings"
	"testing"

	"github.com/fence-dev/fence/pkg/coord"
)

// TestLeaseIDs: a lease id carries its lock's tag, so that the id of
// another lock's lease is refused (ErrInvalid) even once that lease is gone;
// 16 digits without a tag (fences before it) are ids of no known lock, gone
// when they are not the holder's; anything else is malformed.
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
	if _, err := c.Renew(tctx(t), "a", "0123456789abcdef"); !errors.Is(err, coord.ErrLeaseLost) {
		t.Errorf("Renew with an untagged id = %v, want ErrLeaseLost", err)
	}
	if err := c.Release(tctx(t), "a", "0123456789abcdef"); err != nil {
		t.Errorf("Release with an untagged id = %v, want nil", err)
	}
	for _, id := range []string{"0123456789ABCDEF", nameTag("a") + "0123456789ABCDEF", "0123456789abcde", nameTag("a") + "0123456789abcdef0", "zz!"} {
		if err := c.Release(tctx(t), "a", id); !errors.Is(err, coord.ErrInvalid) || !strings.Contains(err.Error(), "is not a lease id") {
			t.Errorf("Release(%q) = %v, want ErrInvalid", id, err)
		}
	}
}
