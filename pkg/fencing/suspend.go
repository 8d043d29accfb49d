package fencing

import (
	"sync"
	"time"

	"github.com/fence-dev/fence/internal/clock"
)

// suspendCheck is how often the suspend watcher compares the clocks: after a
// system suspend, holds look at the boot clock within this time of resuming.
const suspendCheck = 250 * time.Millisecond

// suspends notices system suspends for every hold of this process. A suspend
// stops Go's timers (CLOCK_MONOTONIC) but not the boot clock, on which
// leases are counted, so the scheduler sleeping until a hold's next renewal
// could wake long after another's safe-until. One goroutine per process
// compares the two clocks while the scheduler runs, and wakes it when they
// part.
var suspends suspendWatch

type suspendWatch struct {
	mu    sync.Mutex
	ch    chan struct{} // closed at the next suspend noticed
	users int
	quit  chan struct{}
}

// join registers a user (a scheduler) and returns the func that
// unregisters it. The watcher runs while at least one is registered.
func (s *suspendWatch) join() func() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.users++
	if s.users == 1 {
		s.ch, s.quit = make(chan struct{}), make(chan struct{})
		go s.watch(s.quit)
	}
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.users--; s.users == 0 {
			close(s.quit)
		}
	}
}

// current is closed when the next suspend is noticed.
func (s *suspendWatch) current() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ch
}

func (s *suspendWatch) watch(quit <-chan struct{}) {
	t := time.NewTicker(suspendCheck)
	defer t.Stop()
	boot, mono := clock.Now(), time.Now()
	for {
		select {
		case <-quit:
			return
		case <-t.C:
		}
		b, m := clock.Now(), time.Now()
		// The boot clock ran on while the monotonic clock stood still.
		if b.Sub(boot)-m.Sub(mono) > suspendCheck/2 {
			s.wake()
		}
		boot, mono = b, m
	}
}

// wake tells every hold to look at the clock.
func (s *suspendWatch) wake() {
	s.mu.Lock()
	defer s.mu.Unlock()
	close(s.ch)
	s.ch = make(chan struct{})
}
