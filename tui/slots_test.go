package tui

import (
	"strings"
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
	sem.Slots, sem.Holders = 3, []coord.HolderInfo{one, two} // one is the oldest, already on top
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

// TestSemaphoreDetails: the details of a semaphore name each holder (slot,
// holder, token, time left, held for) below the oldest's fields.
func TestSemaphoreDetails(t *testing.T) {
	sem := held("backups", "db-1:10", 41, 30*time.Second, 25*time.Second, time.Minute)
	one := sem.AllHolders()[0]
	two := one
	two.Slot, two.Holder, two.Token, two.TTLLeft = 2, "db-2:20", 44, 10*time.Second
	sem.Slots, sem.Holders = 3, []coord.HolderInfo{one, two} // one is the oldest, already on top
	h := newHarness(t, newFake(sem), Options{})
	h.settle()
	h.key("enter")
	h.until("the timeline", func() bool { return !h.m.detailsBusy })
	h.send(teaSize(120, 30))
	view := h.m.View()
	checkFrame(t, view, 120, 30)
	for _, want := range []string{
		"slots     2 of 3 held",
		"          slot 0: db-1:10, token 41, 25s of 30s left, held 1m",
		"          slot 2: db-2:20, token 44, 10s of 30s left, held 1m",
	} {
		if !strings.Contains(view, want) {
			t.Errorf("details lack %q:\n%s", want, view)
		}
	}
}
