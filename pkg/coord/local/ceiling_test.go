package local

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/fence-dev/fence/pkg/coord"
)

// writeTokens writes a state of lock name with the given last and reserved
// tokens, of this boot (or of another when boot is not ""), and no holder.
func writeTokens(t testing.TB, c *coordinator, name string, last, reserved uint64, boot string) string {
	t.Helper()
	if boot == "" {
		boot = bootID()
	}
	path := c.StateFile(name)
	st := fmt.Sprintf(`{"version":2,"name":%q,"last_token":%d,"reserved_token":%d,"boot_id":%q}`, name, last, reserved, boot)
	if err := os.WriteFile(path, []byte(st), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// readTokens returns the last and reserved tokens of a state file.
func readTokens(t testing.TB, path string) (last, reserved uint64) {
	t.Helper()
	_, b := stateInfo(t, path)
	var st state
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatal(err)
	}
	return st.LastToken, st.Reserved
}

// wantExhausted checks that err is the one-line refusal of a lock that has
// issued coord.MaxToken.
func wantExhausted(t testing.TB, what, name string, err error) {
	t.Helper()
	want := fmt.Sprintf("lock %q has issued its last fencing token (%d", name, uint64(coord.MaxToken))
	if !errors.Is(err, coord.ErrUnavailable) || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "\n") {
		t.Errorf("%s = %v, want a one-line ErrUnavailable saying %q", what, err, want)
	}
}

// TestTokenCeiling: the tokens of a lock go up to coord.MaxToken (2^63-1)
// and no further (never wraps): the token at the ceiling is issued, and every Acquire after
// it is refused, at once, whether the lock is held or free, without
// changing the state.
func TestTokenCeiling(t *testing.T) {
	c := openTB(t, newDir(t))
	path := writeTokens(t, c, "top", coord.MaxToken-2, coord.MaxToken-2, "")

	l := acquire(t, c, "top", coord.AcquireOptions{Wait: 0})
	if l.Token != coord.MaxToken-1 {
		t.Fatalf("token %d, want %d", l.Token, uint64(coord.MaxToken-1))
	}
	if last, reserved := readTokens(t, path); last != coord.MaxToken-1 || reserved != coord.MaxToken-1 {
		t.Fatalf("after a grant at 2^63-2: last token %d, reserved %d; want %d for both",
			last, reserved, uint64(coord.MaxToken-1))
	}
	release(t, c, l)

	top := acquire(t, c, "top", coord.AcquireOptions{Wait: 0})
	if top.Token != coord.MaxToken {
		t.Fatalf("token %d, want %d (2^63-1 is issued)", top.Token, uint64(coord.MaxToken))
	}
	// The holder of the last token keeps its lease as any other.
	if _, err := c.Renew(tctx(t), "top", top.ID); err != nil {
		t.Fatalf("Renew of the last token's lease: %v", err)
	}
	snap := snapshot(path)
	for _, wait := range []time.Duration{0, time.Minute, coord.WaitForever} {
		_, err := c.Acquire(tctx(t), "top", coord.AcquireOptions{TTL: time.Minute, Wait: wait})
		wantExhausted(t, fmt.Sprintf("Acquire(wait %v) while the last token is held", wait), "top", err)
	}
	if li := inspect(t, c, "top"); !li.Held || li.Token != coord.MaxToken || li.LastToken != coord.MaxToken || li.Waiters != 0 {
		t.Fatalf("after refused acquisitions: %+v, want held by the last token, no waiter", li)
	}
	if s := snapshot(path); s != snap {
		t.Fatalf("a refused Acquire changed the state:\n%s\n%s", snap, s)
	}
	release(t, c, top)
	_, err := c.Acquire(tctx(t), "top", coord.AcquireOptions{TTL: time.Minute, Wait: 0})
	wantExhausted(t, "Acquire of the free lock", "top", err)
	if last, _ := readTokens(t, path); last != coord.MaxToken {
		t.Fatalf("last token %d after a refusal, want %d", last, uint64(coord.MaxToken))
	}
	if li := inspect(t, c, "top"); li.Held || li.LastToken != coord.MaxToken {
		t.Fatalf("free lock at the ceiling: %+v", li)
	}
	if ls, err := c.List(tctx(t), ""); err != nil || len(ls) != 1 || ls[0].LastToken != coord.MaxToken {
		t.Fatalf("List = %+v, %v", ls, err)
	}
}

// TestTokenCeilingAfterReboot: after a reboot the counter goes on above the
// block an older fence reserved; a block that reached the ceiling leaves no
// token to issue.
func TestTokenCeilingAfterReboot(t *testing.T) {
	c := openTB(t, newDir(t))
	writeTokens(t, c, "boot", coord.MaxToken-5, coord.MaxToken, "another-boot")
	_, err := c.Acquire(tctx(t), "boot", coord.AcquireOptions{TTL: time.Minute, Wait: 0})
	wantExhausted(t, "Acquire after a reboot with the block at the ceiling", "boot", err)

	writeTokens(t, c, "below", coord.MaxToken-5, coord.MaxToken-1, "another-boot")
	if l := acquire(t, c, "below", coord.AcquireOptions{Wait: 0}); l.Token != coord.MaxToken {
		t.Fatalf("token %d after a reboot, want %d", l.Token, uint64(coord.MaxToken))
	}
}

// TestTokensBeyondCeilingFailClosed: a state that holds a token above
// 2^63-1 (an older fence went past the ceiling, or wrapped its reserved
// block) or a reservation below its last token is damaged: every operation
// fails closed with ErrUnavailable, and the state is never reset.
func TestTokensBeyondCeilingFailClosed(t *testing.T) {
	c := openTB(t, newDir(t))
	for _, v := range []struct {
		name           string
		last, reserved uint64
		want           string
	}{
		{"above", coord.MaxToken + 1, coord.MaxToken + 1, "holds token 9223372036854775808, above the largest fencing token 9223372036854775807"},
		{"top", 1<<64 - 1, 1<<64 - 1, "holds token 18446744073709551615, above the largest"},
		{"wrapped", 1<<64 - 617, 382, "holds token 18446744073709550999, above the largest"},
		{"reserved-above", 7, coord.MaxToken + 1, "holds token 9223372036854775808, above the largest"},
		{"reserved-below", 5000, 384, "is inconsistent (reserved token 384 below last token 5000)"},
	} {
		t.Run(v.name, func(t *testing.T) {
			path := writeTokens(t, c, v.name, v.last, v.reserved, "")
			snap := snapshot(path)
			check := func(op string, err error) {
				t.Helper()
				if !errors.Is(err, coord.ErrUnavailable) || !strings.Contains(err.Error(), v.want) ||
					!strings.Contains(err.Error(), "never resets it") || strings.Contains(err.Error(), "\n") {
					t.Errorf("%s = %v, want a one-line ErrUnavailable saying %q", op, err, v.want)
				}
			}
			_, err := c.Acquire(tctx(t), v.name, coord.AcquireOptions{TTL: time.Minute, Wait: 0})
			check("Acquire", err)
			_, err = c.Acquire(tctx(t), v.name, coord.AcquireOptions{TTL: time.Minute, Wait: coord.WaitForever})
			check("Acquire(wait)", err)
			_, err = c.Inspect(tctx(t), v.name)
			check("Inspect", err)
			_, err = c.Revoke(tctx(t), v.name)
			check("Revoke", err)
			_, err = c.List(tctx(t), v.name)
			check("List", err)
			if s := snapshot(path); s != snap {
				t.Errorf("the state was changed:\n%s\n%s", snap, s)
			}
			// So that the other cases' List sees only their own lock.
			os.Remove(path)
		})
	}
}
