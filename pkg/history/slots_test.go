package history_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/fence-dev/fence/pkg/coord"
)

// TestSemaphoreHistory: the holders of a semaphore (--slots) are recorded
// each as a lock's holder is: a second holder's acquisition does not make
// the first one expired, a holder that is not the oldest is released (not
// expired) on its release, and a revoke by token records that holder.
func TestSemaphoreHistory(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			r := b.open(t)
			const lock = "sem"
			var ls []*coord.Lease
			for _, h := range []string{"a", "b", "c"} {
				l, err := r.Acquire(ctxT(t), lock, coord.AcquireOptions{TTL: time.Minute, Holder: h, Slots: 3})
				if err != nil {
					t.Fatal(err)
				}
				ls = append(ls, l)
			}
			if err := r.Release(ctxT(t), lock, ls[1].ID); err != nil {
				t.Fatal(err)
			}
			if _, err := r.RevokeToken(ctxT(t), lock, ls[2].Token); err != nil {
				t.Fatal(err)
			}
			if err := r.Release(ctxT(t), lock, ls[0].ID); err != nil {
				t.Fatal(err)
			}
			a, bt, c := ls[0].Token, ls[1].Token, ls[2].Token
			want := fmtKinds("acquired:a:", a, " acquired:b:", bt, " acquired:c:", c, " released:b:", bt, " revoked:c:", c, " released:a:", a)
			if got := kinds(t, r, lock); got != want {
				t.Errorf("history of a semaphore:\n got %s\nwant %s", got, want)
			}
		})
	}
}

// fmtKinds joins strings and tokens as kinds renders them.
func fmtKinds(parts ...any) string {
	var s string
	for _, p := range parts {
		switch v := p.(type) {
		case string:
			s += v
		case uint64:
			s += strconv.FormatUint(v, 10)
		}
	}
	return s
}
