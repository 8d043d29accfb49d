package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/fence-dev/fence/internal/exitcode"
)

// interruptible returns a context cancelled by SIGINT, SIGTERM or SIGHUP, and
// a function that returns, once one came, the error of the command it
// stopped (exit 128+signal), else nil. Commands that wait
// (acquire, list --watch) use it; stop releases the signal handlers.
func interruptible(parent context.Context) (ctx context.Context, interrupted func() error, stop func()) {
	ctx, cancel := context.WithCancelCause(parent)
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	go func() {
		select {
		case s := <-ch:
			n := 2
			if s, ok := s.(syscall.Signal); ok {
				n = int(s)
			}
			cancel(exitcode.New(128+n, fmt.Errorf("interrupted by %v", s)))
		case <-ctx.Done():
		}
	}()
	interrupted = func() error {
		var e *exitcode.Error
		if errors.As(context.Cause(ctx), &e) {
			return e
		}
		return nil
	}
	stop = func() {
		signal.Stop(ch)
		cancel(nil)
	}
	return ctx, interrupted, stop
}
