// Package follow keeps a coordinator's watch running for its long-lived
// readers, the dashboard (fence top) and the exporter: a watch that fails
// to start, or ends, is started again after a pause.
package follow

import (
	"context"
	"errors"
	"time"

	"github.com/fence-dev/fence/pkg/coord"
)

// The pause before a watch is started again: minRetry, doubling up to
// maxRetry while it keeps failing.
const (
	minRetry = 500 * time.Millisecond
	maxRetry = 10 * time.Second
)

// ErrEnded is the Err of a watch whose channel closed before ctx ended.
var ErrEnded = errors.New("watch ended")

// Event is an event of the watch or, when Err is set, news that the watch
// failed to start or ended (Event is empty then); it is started again.
type Event struct {
	coord.Event
	Err error
}

// Watch follows the watch of the locks under prefix until ctx ends, then
// closes the channel it returns. Each start of the watch is sent as an
// EventReset: the events after it are not missed, so a List then sees
// everything; a consumer lists on every EventReset.
func Watch(ctx context.Context, c coord.Coordinator, prefix string) <-chan Event {
	// The buffer lets a reader take a burst of events at once.
	out := make(chan Event, 1024)
	send := func(ev Event) bool {
		select {
		case out <- ev:
			return true
		case <-ctx.Done():
			return false
		}
	}
	go func() {
		defer close(out)
		retry := minRetry
		for {
			wctx, cancel := context.WithCancel(ctx)
			ch, err := c.Watch(wctx, prefix)
			if err == nil && send(Event{Event: coord.Event{Type: coord.EventReset}}) {
				retry = minRetry
				err = ErrEnded
				for ev := range ch {
					if !send(Event{Event: ev}) {
						break
					}
				}
			}
			cancel()
			if ctx.Err() != nil || !send(Event{Err: err}) || !Sleep(ctx, retry) {
				return
			}
			retry = min(2*retry, maxRetry)
		}
	}()
	return out
}

// Sleep waits for d, or until ctx ends: false then.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
