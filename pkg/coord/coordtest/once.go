package coordtest

import (
	"errors"
	"testing"
	"time"

	"github.com/fence-dev/fence/pkg/coord"
)

// completer returns c, skipping the case when it keeps no completion
// records (a kit's own partial coordinator: Completions returns
// errors.ErrUnsupported).
func completer(t *testing.T, c coord.Coordinator) coord.Coordinator {
	t.Helper()
	if _, err := c.Completions(ctx(t), "probe"); errors.Is(err, errors.ErrUnsupported) {
		t.Skip("the backend keeps no completion records")
	}
	return c
}

// onceRecords: Complete under a held lease writes a record that every client
// reads, with the lease's holder and token; a second Complete of the key, by
// a later holder, keeps the first; Forget removes it and Mark writes one
// without a lease. Bad keys are ErrInvalid.
func (s *suite) onceRecords(t *testing.T) {
	name := s.name(t, "once")
	c1, c2 := s.client(t), s.client(t)
	k1, k2 := completer(t, c1), completer(t, c2)
	if _, ok, err := k2.Completion(ctx(t), name, "2025-01-01"); err != nil || ok {
		t.Fatalf("Completion before any run = ok %v, %v; want none", ok, err)
	}
	l := acquire(t, c1, name, coord.AcquireOptions{Holder: "first", TTL: 5 * time.Second})
	started := time.Now().Add(-time.Second).Round(0)
	rec := coord.Completion{Lock: name, Key: "2025-01-01", Holder: l.Holder, Token: l.Token, Started: started, Finished: time.Now().Round(0)}
	if err := k1.Complete(ctx(t), l.ID, rec, 0); err != nil {
		t.Fatalf("Complete under the held lease: %v", err)
	}
	got, ok, err := k2.Completion(ctx(t), name, "2025-01-01")
	if err != nil || !ok {
		t.Fatalf("Completion after Complete = ok %v, %v", ok, err)
	}
	if got.Token != l.Token || got.Holder != "first" || got.Key != rec.Key || got.Lock != name || !got.Started.Equal(started) {
		t.Errorf("record = %+v, want token %d, holder first, started %v", got, l.Token, started)
	}
	if d := got.Expires.Sub(got.Finished); d < coord.DefaultKeep-time.Minute {
		t.Errorf("record kept for %v, want the default %v", d, coord.DefaultKeep)
	}
	release(t, c1, l)

	l2 := acquire(t, c2, name, coord.AcquireOptions{Holder: "second", TTL: 5 * time.Second})
	rec2 := rec
	rec2.Holder, rec2.Token = "second", l2.Token
	if err := k2.Complete(ctx(t), l2.ID, rec2, 0); err != nil {
		t.Fatalf("second Complete of a recorded key: %v, want nil", err)
	}
	if got, _, _ := k1.Completion(ctx(t), name, rec.Key); got.Token != l.Token {
		t.Errorf("second Complete replaced the record: token %d, want the first %d", got.Token, l.Token)
	}
	release(t, c2, l2)

	if err := k1.Mark(ctx(t), coord.Completion{Lock: name, Key: "by-hand", Holder: "operator"}, 0); err != nil {
		t.Fatalf("Mark: %v", err)
	}
	list, err := k2.Completions(ctx(t), name)
	if err != nil || len(list) != 2 || list[0].Key != "2025-01-01" || list[1].Key != "by-hand" {
		t.Fatalf("Completions = %+v, %v; want 2025-01-01 and by-hand", list, err)
	}
	if other, err := k2.Completions(ctx(t), name+"x"); err != nil || len(other) != 0 {
		t.Errorf("Completions of another lock = %+v, %v; want none", other, err)
	}
	if removed, err := k2.Forget(ctx(t), name, "2025-01-01"); err != nil || !removed {
		t.Fatalf("Forget = %v, %v; want removed", removed, err)
	}
	if removed, err := k2.Forget(ctx(t), name, "2025-01-01"); err != nil || removed {
		t.Errorf("second Forget = %v, %v; want nothing removed", removed, err)
	}
	if _, ok, _ := k1.Completion(ctx(t), name, "2025-01-01"); ok {
		t.Error("a forgotten record is still there")
	}
	for _, key := range []string{"", "a\nb", string(make([]byte, coord.MaxNameLen+1))} {
		if _, _, err := k1.Completion(ctx(t), name, key); !errors.Is(err, coord.ErrInvalid) {
			t.Errorf("Completion(key %q) = %v, want ErrInvalid", key, err)
		}
		if err := k1.Mark(ctx(t), coord.Completion{Lock: name, Key: key}, 0); !errors.Is(err, coord.ErrInvalid) {
			t.Errorf("Mark(key %q) = %v, want ErrInvalid", key, err)
		}
	}
}

// onceNeedsTheLease: a lease that expired, or was released, cannot record a
// completion (ErrLeaseLost, nothing written); the successor can, and the one
// record carries its token.
func (s *suite) onceNeedsTheLease(t *testing.T) {
	name := s.name(t, "once-lease")
	c1, c2 := s.client(t), s.client(t)
	k1, k2 := completer(t, c1), completer(t, c2)
	l1 := acquire(t, c1, name, coord.AcquireOptions{Holder: "frozen", TTL: s.h.ShortTTL})
	l2 := acquire(t, c2, name, coord.AcquireOptions{Holder: "successor", Wait: coord.WaitForever})
	rec := coord.Completion{Lock: name, Key: "job", Holder: "frozen", Token: l1.Token, Started: time.Now()}
	if err := k1.Complete(ctx(t), l1.ID, rec, 0); !errors.Is(err, coord.ErrLeaseLost) {
		t.Fatalf("Complete by the expired holder = %v, want ErrLeaseLost", err)
	}
	if _, ok, err := k2.Completion(ctx(t), name, "job"); err != nil || ok {
		t.Fatalf("the expired holder's Complete left a record (ok %v, %v)", ok, err)
	}
	rec2 := coord.Completion{Lock: name, Key: "job", Holder: "successor", Token: l2.Token, Started: time.Now()}
	if err := k2.Complete(ctx(t), l2.ID, rec2, 0); err != nil {
		t.Fatalf("Complete by the successor: %v", err)
	}
	release(t, c2, l2)
	if err := k2.Complete(ctx(t), l2.ID, coord.Completion{Lock: name, Key: "after-release", Token: l2.Token}, 0); !errors.Is(err, coord.ErrLeaseLost) {
		t.Errorf("Complete after Release = %v, want ErrLeaseLost", err)
	}
	list, err := k1.Completions(ctx(t), name)
	if err != nil || len(list) != 1 || list[0].Token != l2.Token || list[0].Holder != "successor" {
		t.Fatalf("Completions = %+v, %v; want exactly one, of the successor's token %d", list, err, l2.Token)
	}
}

// onceRetention: a record written with a short retention disappears on its
// own, never before it.
func (s *suite) onceRetention(t *testing.T) {
	name := s.name(t, "once-keep")
	c := s.client(t)
	k := completer(t, c)
	keep := 2 * time.Second
	t0 := time.Now()
	if err := k.Mark(ctx(t), coord.Completion{Lock: name, Key: "short"}, keep); err != nil {
		t.Fatalf("Mark: %v", err)
	}
	if err := k.Mark(ctx(t), coord.Completion{Lock: name, Key: "long"}, time.Hour); err != nil {
		t.Fatalf("Mark: %v", err)
	}
	for {
		_, ok, err := k.Completion(ctx(t), name, "short")
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			if d := time.Since(t0); d < keep-100*time.Millisecond {
				t.Fatalf("record kept for %v gone after %v", keep, d)
			}
			break
		}
		if time.Since(t0) > keep+guard {
			t.Fatalf("record kept for %v still there after %v", keep, time.Since(t0))
		}
		time.Sleep(50 * time.Millisecond)
	}
	list, err := k.Completions(ctx(t), name)
	if err != nil || len(list) != 1 || list[0].Key != "long" {
		t.Fatalf("Completions after the expiry = %+v, %v; want only long", list, err)
	}
	if err := k.Mark(ctx(t), coord.Completion{Lock: name, Key: "bad"}, time.Millisecond); !errors.Is(err, coord.ErrInvalid) {
		t.Errorf("Mark with retention 1ms = %v, want ErrInvalid", err)
	}
}
