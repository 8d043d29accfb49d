package tui

import (
	"testing"
	"time"

	"github.com/fence-dev/fence/pkg/coord"
)

// TestSemaphoreState: a lock with slots > 1 shows how many of its slots
// are held in the STATE column ("2/3 held").
func TestSemaphoreState(t *testing.T) {
	sem := held("backups", "db-1:10", 41, 30*time.Second, 25*time.Second, time.Minute)
	one := sem.AllHolders()[0]
	two := one
	two.Slot, two.Holder, two.Token = 1, "db-2:20", 44
	sem.SetHolders(3, []coord.HolderInfo{one, two})
	h := newHarness(t, newFake(sem, held("plain", "x:1", 7, 30*time.Second, 25*time.Second, time.Second)), Options{})
	h.settle()
	s := h.screen()
	if got := fields(s[lineOf(s, "backups")]); len(got) < 3 || got[1] != "2/3" || got[2] != "held" {
		t.Errorf("semaphore row %q, want STATE \"2/3 held\"", got)
	}
	if got := fields(s[lineOf(s, "plain")]); got[1] != "held" {
		t.Errorf("plain lock row %q, want STATE \"held\"", got)
	}
}
