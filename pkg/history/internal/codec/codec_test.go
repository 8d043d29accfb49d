package codec

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/fence-dev/fence/pkg/history"

	"github.com/fence-dev/fence/pkg/coord"
)

func TestRoundTrip(t *testing.T) {
	ev := history.Event{
		Time: time.Date(2030, 1, 2, 3, 4, 5, 6, time.UTC), Lock: "a/b", Kind: history.Acquired, Holder: "h:1",
		Token: 42, Wait: 1500 * time.Millisecond, HeldFor: time.Hour, Count: 3, Error: "e", Key: "k", AcceptedToken: 43,
		LeaseID: "694d7a0b1c2d3e4f",
	}
	b, err := Encode(7, ev)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(b), `{"seq":7,"time":"2030-01-02T03:04:05.000000006Z","lock":"a/b","kind":"acquired"`) {
		t.Errorf("encoded %s", b)
	}
	seq, got, err := Decode(b)
	if err != nil || seq != 7 || !reflect.DeepEqual(got, ev) {
		t.Fatalf("Decode = %d, %+v, %v", seq, got, err)
	}
	// Unknown fields and kinds (a newer fence) are read.
	if _, got, err := Decode([]byte(`{"time":"2030-01-01T00:00:00Z","lock":"x","kind":"future","extra":1}`)); err != nil || got.Kind != "future" {
		t.Fatalf("forward-compatible decode = %+v, %v", got, err)
	}
}

func TestDecodeRefuses(t *testing.T) {
	for _, in := range []string{
		``, `{`, `[]`, `null`, `{}`,
		`{"time":"2030-01-01T00:00:00Z","kind":"acquired"}`,
		`{"time":"2030-01-01T00:00:00Z","lock":"","kind":"acquired"}`,
		`{"time":"2030-01-01T00:00:00Z","lock":"a\u0000","kind":"acquired"}`,
		`{"lock":"x","kind":"acquired"}`,
		`{"time":"2030-01-01T00:00:00Z","lock":"x"}`,
		`{"time":"2030-01-01T00:00:00Z","lock":"x","kind":"acquired","wait_ns":-1}`,
		`{"time":"2030-01-01T00:00:00Z","lock":"x","kind":"acquired","token":-1}`,
		`{"time":"2030-01-01T00:00:00Z","lock":"x","kind":"acquired","error":"` + strings.Repeat("e", MaxLen) + `"}`,
	} {
		if _, _, err := Decode([]byte(in)); err == nil {
			t.Errorf("Decode(%.60q) accepted", in)
		}
	}
}

func FuzzDecode(f *testing.F) {
	f.Add([]byte(`{"seq":1,"time":"2030-01-01T00:00:00Z","lock":"x","kind":"acquired"}`))
	f.Add([]byte(`{"time":"x"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		seq, ev, err := Decode(b)
		if err != nil {
			return
		}
		if coord.ValidateName(ev.Lock) != nil || ev.Kind == "" || ev.Time.IsZero() || ev.Wait < 0 {
			t.Fatalf("accepted an invalid event %+v", ev)
		}
		// What decodes encodes again, to the same event.
		again, err := Encode(seq, ev)
		if err != nil {
			return // too long once re-encoded (escapes): fine
		}
		seq2, ev2, err := Decode(again)
		if err != nil || seq2 != seq || !ev2.Time.Equal(ev.Time) || ev2.Lock != ev.Lock || ev2.Kind != ev.Kind {
			t.Fatalf("re-encoding changed the event: %+v -> %+v (%v)", ev, ev2, err)
		}
	})
}
