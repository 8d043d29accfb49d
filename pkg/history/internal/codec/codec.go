// Package codec is the stored form of a history event, shared by the
// history stores: one JSON object per event, durations in nanoseconds.
//
//	{"seq":7,"time":"2025-01-02T03:04:05.123456789Z","lock":"jobs/nightly","kind":"acquired",
//	 "holder":"host:42","token":17,"wait_ns":1500000000,"lease_id":"1f2e…"}
//
// Unknown fields are ignored, so that a newer fence may add some; anything
// else that does not decode into a valid event is corrupt.
package codec

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/fence-dev/fence/pkg/history"

	"github.com/fence-dev/fence/pkg/coord"
)

// MaxLen bounds one encoded event, in bytes. Normalized events are far
// smaller (names and keys are at most 256 bytes, free text 1 KiB).
const MaxLen = 16 << 10

// wire is the stored form: the event's JSON form and its seq.
type wire struct {
	Seq uint64 `json:"seq,omitempty"`
	history.Event
}

// Encode returns the stored form of ev, with seq when it is not 0.
func Encode(seq uint64, ev history.Event) ([]byte, error) {
	b, err := json.Marshal(wire{Seq: seq, Event: ev})
	if err != nil {
		return nil, err
	}
	if len(b) > MaxLen {
		return nil, fmt.Errorf("%w: history event for %q is %d bytes encoded, the limit is %d",
			coord.ErrInvalid, ev.Lock, len(b), MaxLen)
	}
	return b, nil
}

// Decode reads one stored event and its seq (0 when absent). The error
// says what is wrong, for a "corrupt" message.
func Decode(b []byte) (uint64, history.Event, error) {
	if len(b) > MaxLen {
		return 0, history.Event{}, fmt.Errorf("event is %d bytes long", len(b))
	}
	var w wire
	if err := json.Unmarshal(b, &w); err != nil {
		return 0, history.Event{}, err
	}
	switch {
	case w.Time.IsZero():
		return 0, history.Event{}, errors.New("event has no time")
	case coord.ValidateName(w.Lock) != nil:
		return 0, history.Event{}, fmt.Errorf("event has an invalid lock name %q", w.Lock)
	case w.Kind == "":
		return 0, history.Event{}, errors.New("event has no kind")
	case w.Wait < 0 || w.HeldFor < 0 || w.Count < 0:
		return 0, history.Event{}, errors.New("event has a negative duration or count")
	}
	return w.Seq, w.Event, nil
}
