package local

import (
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/fence-dev/fence/pkg/clock"
	"github.com/fence-dev/fence/pkg/coord"
)

// openReserve opens a coordinator on dir, closed at cleanup.
func openReserve(t *testing.T, dir string) *Coordinator {
	t.Helper()
	c, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// holdAndRelease takes and releases lock name n times on c and returns the
// last token.
func holdAndRelease(t *testing.T, c *Coordinator, name string, n int) uint64 {
	t.Helper()
	var last uint64
	for range n {
		l, err := c.Acquire(tctx(t), name, coord.AcquireOptions{TTL: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Release(tctx(t), name, l.ID); err != nil {
			t.Fatal(err)
		}
		last = l.Token
	}
	return last
}

// readReservation reads lock name's reservation file.
func readReservation(t *testing.T, c *Coordinator, name string) reservation {
	t.Helper()
	f := c.files(name)
	b, err := os.ReadFile(f.rsv)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(f.rsv)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("reservation file %s has mode %v, want 0600", f.rsv, fi.Mode().Perm())
	}
	var r reservation
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("reservation %s: %v", b, err)
	}
	return r
}

// TestReservationFile: the grant that reserves a block writes the lock's
// reservation file (its name, the reserved token, this boot) and records
// the boot in the state; the grants within the block write neither.
func TestReservationFile(t *testing.T) {
	if clock.BootID() == "" {
		t.Skip("no boot id here: every grant is durable, and no reservation file is written")
	}
	c := openReserve(t, newDir(t))
	if last := holdAndRelease(t, c, "job", 3); last != 3 {
		t.Fatalf("last token %d, want 3", last)
	}
	r := readReservation(t, c, "job")
	if r.Name != "job" || r.Reserved != tokenBlock || r.BootID != clock.BootID() {
		t.Fatalf("reservation %+v, want job, %d, this boot", r, tokenBlock)
	}
	st, err := load(c.files("job"))
	if err != nil {
		t.Fatal(err)
	}
	if st.ReserveBoot != clock.BootID() || st.Reserved != tokenBlock {
		t.Fatalf("state: reserve_boot %q, reserved %d; want this boot's, %d", st.ReserveBoot, st.Reserved, tokenBlock)
	}
}

// TestCrashCutStateRecovered: what a crash can leave of a state file that
// was replaced without fsync (empty, zeros, cut short) is read, under a
// later boot than the reservation's, as the lock free, its next token above
// the reservation; under the reservation's own boot, without a reservation,
// or with one that does not check out, it fails closed, as any damaged
// state does.
func TestCrashCutStateRecovered(t *testing.T) {
	if clock.BootID() == "" {
		t.Skip("no boot id here")
	}
	damages := map[string]func([]byte) []byte{
		"empty": func([]byte) []byte { return nil },
		"zeros": func(b []byte) []byte { return make([]byte, len(b)) },
		"cut":   func(b []byte) []byte { return b[:len(b)/2] },
	}
	type setup struct {
		name    string
		damage  string
		rsv     func(r *reservation) // nil: no reservation file
		recover bool
	}
	earlier := func(r *reservation) { r.BootID = "an-earlier-boot" }
	cases := []setup{
		{"crash, empty", "empty", earlier, true},
		{"crash, zeros", "zeros", earlier, true},
		{"crash, cut", "cut", earlier, true},
		{"same boot", "cut", func(*reservation) {}, false},
		{"no reservation", "cut", nil, false},
		{"reservation of another lock", "cut", func(r *reservation) { earlier(r); r.Name = "other" }, false},
		{"reservation without a token", "empty", func(r *reservation) { earlier(r); r.Reserved = 0 }, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := openReserve(t, newDir(t))
			holdAndRelease(t, c, "job", 3)
			f := c.files("job")
			r := readReservation(t, c, "job")
			if tc.rsv == nil {
				if err := os.Remove(f.rsv); err != nil {
					t.Fatal(err)
				}
			} else {
				tc.rsv(&r)
				b, _ := json.Marshal(r)
				if err := os.WriteFile(f.rsv, b, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			b, err := os.ReadFile(f.state)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(f.state, damages[tc.damage](b), 0o600); err != nil {
				t.Fatal(err)
			}
			l, err := c.Acquire(tctx(t), "job", coord.AcquireOptions{TTL: 10 * time.Second})
			if !tc.recover {
				if err == nil || !errors.Is(err, coord.ErrUnavailable) || !strings.Contains(err.Error(), "state file") {
					t.Fatalf("Acquire of a damaged state = %v, %v; want it refused (fail closed)", l, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Acquire after the crash: %v", err)
			}
			if l.Token != tokenBlock+1 {
				t.Fatalf("token %d after the crash, want %d: above every token the reservation covered", l.Token, tokenBlock+1)
			}
			if r := readReservation(t, c, "job"); r.Reserved != 2*tokenBlock || r.BootID != clock.BootID() {
				t.Fatalf("reservation after the crash %+v, want %d under this boot", r, 2*tokenBlock)
			}
		})
	}
}
