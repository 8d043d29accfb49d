package fencing

import (
	"testing"
	"time"
)

// TestSuspendWatch: the watcher runs while holds are registered, wakes every
// registered hold at once, and stops with the last one.
func TestSuspendWatch(t *testing.T) {
	var s suspendWatch
	leave1 := s.join()
	leave2 := s.join()
	ch := s.current()
	s.wake() // as the watcher does when it notices a suspend
	select {
	case <-ch:
	case <-time.After(5 * time.Second):
		t.Fatal("a noticed suspend did not wake the holds")
	}
	if next := s.current(); next == ch {
		t.Fatal("the next suspend has no channel of its own")
	}
	quit := s.quit
	leave1()
	select {
	case <-quit:
		t.Fatal("the watcher stopped while a hold still runs")
	default:
	}
	leave2()
	select {
	case <-quit:
	default:
		t.Fatal("the watcher runs on with no hold")
	}
}
