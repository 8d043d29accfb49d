package follow

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/fence-dev/fence/pkg/coord"
)

// flaky is a coordinator whose first Watch fails; each later one runs
// until its end channel is closed or its context ends.
type flaky struct {
	coord.Coordinator
	mu      sync.Mutex
	calls   int
	watches []chan coord.Event
	ends    []chan struct{}
}

func (f *flaky) Watch(ctx context.Context, _ string) (<-chan coord.Event, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.calls++; f.calls == 1 {
		return nil, errors.New("down")
	}
	ch, end := make(chan coord.Event, 1), make(chan struct{})
	f.watches, f.ends = append(f.watches, ch), append(f.ends, end)
	go func() {
		select {
		case <-ctx.Done():
		case <-end:
		}
		close(ch)
	}()
	return ch, nil
}

func (f *flaky) last() (chan coord.Event, chan struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.watches[len(f.watches)-1], f.ends[len(f.ends)-1]
}

// TestWatch: a failed start is an Err, then the watch is started again
// (an EventReset) after a pause; its events follow; its end is ErrEnded
// and it is started again; the channel closes when ctx ends.
func TestWatch(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	f := &flaky{}
	start := time.Now()
	evs := Watch(ctx, f, "p/")
	next := func(what string) Event {
		t.Helper()
		select {
		case ev := <-evs:
			return ev
		case <-time.After(10 * time.Second):
			t.Fatalf("no %s", what)
		}
		return Event{}
	}
	if ev := next("failure"); ev.Err == nil || ev.Err.Error() != "down" {
		t.Fatalf("first = %+v, want the failed start", ev)
	}
	if ev := next("start"); ev.Err != nil || ev.Type != coord.EventReset {
		t.Fatalf("second = %+v, want an EventReset", ev)
	}
	if d := time.Since(start); d < minRetry {
		t.Errorf("started again after %v, want a pause of %v", d, minRetry)
	}
	ch, end := f.last()
	ch <- coord.Event{Type: coord.EventAcquired, Info: coord.LockInfo{Name: "p/a"}}
	if ev := next("event"); ev.Type != coord.EventAcquired || ev.Info.Name != "p/a" {
		t.Fatalf("event = %+v", ev)
	}
	close(end)
	if ev := next("end"); !errors.Is(ev.Err, ErrEnded) {
		t.Fatalf("after the end = %+v, want ErrEnded", ev)
	}
	if ev := next("restart"); ev.Type != coord.EventReset {
		t.Fatalf("after the end = %+v, want an EventReset", ev)
	}
	cancel()
	for range evs { // closes
	}
}
