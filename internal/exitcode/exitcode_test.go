package exitcode

import (
	"errors"
	"fmt"
	"testing"

	"github.com/fence-dev/fence/pkg/coord"
)

type ownCode struct{}

func (ownCode) Error() string { return "own" }
func (ownCode) ExitCode() int { return 42 }

func TestCode(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want int
	}{
		{nil, OK},
		{coord.ErrBusy, Busy},
		{fmt.Errorf("acquire x: %w", coord.ErrBusy), Busy},
		{fmt.Errorf("renew: %w", coord.ErrLeaseLost), LeaseLost},
		{fmt.Errorf("put: %w", ErrStale), Stale},
		{fmt.Errorf("%w: bad name", coord.ErrInvalid), Failure},
		{fmt.Errorf("dial: %w", coord.ErrUnavailable), Failure},
		{fmt.Errorf("x: %w", ErrUsage), Failure},
		{coord.ErrNotHeld, Failure},
		{errors.New("anything else"), Failure},
		{New(No, errors.New("free")), No},
		{Silent(No), No},
		{fmt.Errorf("wrapped: %w", New(Deadline, coord.ErrBusy)), Deadline}, // an explicit code wins
		{fmt.Errorf("w: %w", ownCode{}), 42},
	} {
		if got := Code(tc.err); got != tc.want {
			t.Errorf("Code(%v) = %d, want %d", tc.err, got, tc.want)
		}
	}
}

func TestSilent(t *testing.T) {
	if !IsSilent(Silent(1)) || !IsSilent(fmt.Errorf("x: %w", Silent(1))) {
		t.Fatal("Silent error not silent")
	}
	if IsSilent(New(1, errors.New("say it"))) || IsSilent(errors.New("plain")) {
		t.Fatal("a non-silent error is silent")
	}
	e := New(Busy, coord.ErrBusy)
	if !errors.Is(e, coord.ErrBusy) || e.Error() != coord.ErrBusy.Error() {
		t.Fatalf("New does not wrap: %v", e)
	}
}
