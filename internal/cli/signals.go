package cli

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/fence-dev/fence/internal/exitcode"
)

// interruptible returns a context cancelled by SIGINT, SIGTERM or SIGHUP, and
// a function converting an error caused by that cancellation into exit
// 128+signal ("interrupted"). Commands that wait (acquire, list --watch) use
// it; stop releases the signal handlers.
func interruptible(parent context.Context) (ctx context.Context, interrupted func() (os.Signal, bool), stop func()) {
	ctx, cancel := context.WithCancel(parent)
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	got := make(chan os.Signal, 1)
	done := make(chan struct{})
	go func() {
		select {
		case s := <-ch:
			got <- s
			cancel()
		case <-done:
		}
	}()
	interrupted = func() (os.Signal, bool) {
		select {
		case s := <-got:
			got <- s
			return s, true
		default:
			return nil, false
		}
	}
	stop = func() {
		signal.Stop(ch)
		close(done)
		cancel()
	}
	return ctx, interrupted, stop
}

// interruptedError is the error of a command stopped by sig.
func interruptedError(sig os.Signal) error {
	n := 2
	if s, ok := sig.(syscall.Signal); ok {
		n = int(s)
	}
	return exitcode.New(128+n, fmt.Errorf("interrupted by %v", sig))
}
