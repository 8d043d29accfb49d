package local

import (
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fence-dev/fence/internal/proc"
	"github.com/fence-dev/fence/pkg/coord"
)

// Positions in the queue, from one caller's point of view.
var (
	notQueued   = queuePos{head: -1, mine: -1}         // empty queue, not in it
	behindOther = queuePos{head: 0, mine: -1, rank: 1} // others wait, we are not queued
	atHead      = queuePos{head: 0, mine: 0}           // first running waiter
	second      = queuePos{head: 0, mine: 1, rank: 1}  // one running waiter ahead
	third       = queuePos{head: 0, mine: 2, rank: 2}  // two ahead
	aheadGone   = queuePos{head: -1, mine: 0, rank: 0} // queued, nobody running (we are stopped?)
	headStopped = queuePos{head: 1, mine: 1, rank: 0}  // a stopped waiter ahead is passed over
)

// TestNextMove: every combination of the lock's verdict, the limit, the
// position and the caller's wish to wait.
func TestNextMove(t *testing.T) {
	for _, free := range []bool{false, true} {
		for _, limited := range []bool{false, true} {
			for _, pos := range []queuePos{notQueued, behindOther, atHead, second, third, aheadGone, headStopped} {
				for _, enqueue := range []bool{false, true} {
					for _, had := range []bool{false, true} {
						tu := turn{free: free, limited: limited, pos: pos}
						ours := pos.head == -1 || pos.mine >= 0 && pos.head == pos.mine
						want := moveStay
						switch {
						case free && ours && !limited:
							want = moveGrant
						case pos.mine < 0 && (enqueue || had):
							want = moveQueue
						}
						if got := nextMove(tu, enqueue, had); got != want {
							t.Errorf("nextMove(%+v, enqueue %v, had ticket %v) = %v, want %v", tu, enqueue, had, got, want)
						}
						if tu.ours() != ours {
							t.Errorf("%+v: ours = %v", tu, tu.ours())
						}
					}
				}
			}
		}
	}
}

func TestMayKill(t *testing.T) {
	cases := []struct {
		t    turn
		want bool
	}{
		{turn{kill: true, pos: notQueued}, true},
		{turn{kill: true, pos: atHead}, true},
		{turn{kill: true, pos: second}, false},
		{turn{kill: true, pos: behindOther}, false},
		{turn{kill: true, limited: true, pos: atHead}, false},
		{turn{kill: false, pos: atHead}, false},
	}
	for _, c := range cases {
		if got := mayKill(c.t); got != c.want {
			t.Errorf("mayKill(%+v) = %v, want %v", c.t, got, c.want)
		}
	}
}

func TestNextAct(t *testing.T) {
	cases := []struct {
		name string
		t    turn
		want act
	}{
		{"ticket missing", turn{pos: behindOther}, actTry},
		{"ticket missing, limited", turn{limited: true, pos: notQueued}, actTry},
		{"free, our turn", turn{free: true, pos: atHead}, actTry},
		{"ended group, our turn", turn{kill: true, pos: atHead}, actTry},
		{"free, stopped waiter passed over", turn{free: true, pos: headStopped}, actTry},
		{"free, another's turn", turn{free: true, pos: second}, actStall},
		{"ended group, another's turn", turn{kill: true, pos: third}, actStall},
		{"held", turn{pos: atHead}, actSleep},
		{"held, behind", turn{pos: second}, actSleep},
		{"free but limited", turn{free: true, limited: true, pos: atHead}, actSleep},
		{"free but limited, behind", turn{free: true, limited: true, pos: second}, actSleep},
		{"free, queued, nobody running", turn{free: true, pos: aheadGone}, actStall},
	}
	for _, c := range cases {
		if got := nextAct(c.t); got != c.want {
			t.Errorf("%s: nextAct(%+v) = %v, want %v", c.name, c.t, got, c.want)
		}
	}
}

func TestNapOf(t *testing.T) {
	holderProc := []proc.ID{{PID: 10, Start: 1}}
	pred := proc.ID{PID: 20, Start: 2}
	withPred := func(p queuePos) queuePos { p.pred = pred; return p }
	cases := []struct {
		name     string
		t        turn
		follow   bool
		until    time.Duration
		stall    time.Duration
		wantDeps []proc.ID
		wantWake time.Duration
	}{
		{"head follows the holder", turn{pos: atHead}, true, time.Minute, 0, holderProc, time.Minute},
		{"second follows the holder and the head", turn{pos: withPred(second)}, true, time.Minute, 0, append(slices.Clone(holderProc), pred), time.Minute},
		{"third follows only the waiter ahead", turn{pos: withPred(third)}, true, time.Minute, 0, []proc.ID{pred}, -1},
		{"frozen: nobody follows the holder", turn{pos: atHead}, false, time.Minute, 0, nil, -1},
		{"stall check sooner than the expiry", turn{pos: withPred(second)}, true, time.Minute, time.Second, append(slices.Clone(holderProc), pred), time.Second},
		{"expiry sooner than the stall check", turn{pos: withPred(second)}, true, time.Millisecond, time.Second, append(slices.Clone(holderProc), pred), time.Millisecond},
		{"stall check without a holder's expiry", turn{pos: withPred(third)}, true, -1, time.Second, []proc.ID{pred}, time.Second},
		{"no holder expiry", turn{pos: atHead}, true, -1, 0, holderProc, -1},
	}
	for _, c := range cases {
		n := napOf(c.t, c.follow, holderProc, c.until, c.stall)
		if !slices.Equal(n.deps, c.wantDeps) || n.wake != c.wantWake {
			t.Errorf("%s: napOf = %+v, want deps %v wake %v", c.name, n, c.wantDeps, c.wantWake)
		}
	}
	if len(holderProc) != 1 {
		t.Fatal("napOf changed the holder's processes")
	}
}

// TestCheckState: each rule a decoded state must meet, and the one that
// fails first.
func TestCheckState(t *testing.T) {
	f := lockFiles{name: "job", base: "job", state: "/s/locks/job.json"}
	ok := func() *state {
		return &state{Version: 2, Name: "job", LastToken: 5, Reserved: 5,
			Holder: &holder{LeaseID: "x", Token: 5, TTL: time.Second}, Queue: []ticket{{ID: "t", PID: 1}}}
	}
	cases := []struct {
		name   string
		change func(*state)
		want   string // "" for no error
	}{
		{"good", func(*state) {}, ""},
		{"format 1", func(st *state) { st.Version = 1 }, ""},
		{"no version", func(st *state) { st.Version = 0 }, "has no format version"},
		{"newer", func(st *state) { st.Version = slotsVersion + 1 }, "written by a newer fence"},
		{"other lock", func(st *state) { st.Name = "other" }, `belongs to lock "other"`},
		{"above the ceiling", func(st *state) { st.LastToken = coord.MaxToken + 1 }, "above the largest fencing token"},
		{"reserved above the ceiling", func(st *state) { st.Reserved = coord.MaxToken + 1 }, "above the largest fencing token"},
		{"reserved below last", func(st *state) { st.Reserved = 4 }, "reserved token 4 below last token 5"},
		{"no reservation (format 1)", func(st *state) { st.Reserved = 0 }, ""},
		{"holder token above last", func(st *state) { st.Holder.Token = 6 }, "holder token 6, last token 5"},
		{"holder without token", func(st *state) { st.Holder.Token = 0 }, "holder token 0"},
		{"holder without lease id", func(st *state) { st.Holder.LeaseID = "" }, "holder token 5"},
		{"holder without ttl", func(st *state) { st.Holder.TTL = 0 }, "holder token 5"},
		{"nil other holder", func(st *state) { st.Others = []*holder{nil} }, "holder token 0"},
		{"negative slots", func(st *state) { st.Slots = -1 }, "slots -1"},
		{"too many slots", func(st *state) { st.Slots = coord.MaxSlots + 1 }, "slots"},
		{"others without holder", func(st *state) {
			st.Others = []*holder{st.Holder}
			st.Holder = nil
		}, "1 other holder(s)"},
		{"waiter without id", func(st *state) { st.Queue[0].ID = "" }, "a waiter without id or pid"},
		{"waiter without pid", func(st *state) { st.Queue[0].PID = 0 }, "a waiter without id or pid"},
	}
	for _, c := range cases {
		st := ok()
		c.change(st)
		err := checkState(f, st)
		if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%s: checkState = %v, want %q", c.name, err, c.want)
		}
	}
	hashed := lockFiles{base: fileBase("job")}
	if err := checkState(hashed, ok()); err != nil {
		t.Errorf("a listed state of its own base: %v", err)
	}
	hashed.base = "=other"
	if err := checkState(hashed, ok()); err == nil || !strings.Contains(err.Error(), "does not match its file name") {
		t.Errorf("a listed state under another base: %v", err)
	}
}

// TestForBoot: a state of another boot keeps only its token (above an
// older fence's reservation); under the same boot a lease record needs a
// holder.
func TestForBoot(t *testing.T) {
	f := lockFiles{name: "job"}
	st := &state{BootID: "old", LastToken: 5, Reserved: 1000, Lease: "r", Holder: &holder{Token: 5},
		Others: []*holder{{Token: 4}}, Queue: []ticket{{ID: "t", PID: 1}}}
	if err := forBoot(f, st, "new"); err != nil {
		t.Fatal(err)
	}
	if st.BootID != "new" || st.Holder != nil || st.Others != nil || st.Queue != nil || st.Lease != "" || st.LastToken != 1000 {
		t.Fatalf("another boot: %+v", st)
	}
	same := &state{BootID: "b", LastToken: 5, Lease: "r"}
	if err := forBoot(f, same, "b"); err == nil || !strings.Contains(err.Error(), "a lease record without a holder") {
		t.Fatalf("a record without a holder: %v", err)
	}
	held := &state{BootID: "b", LastToken: 5, Lease: "r", Holder: &holder{Token: 5}}
	if err := forBoot(f, held, "b"); err != nil || held.Holder == nil || held.LastToken != 5 {
		t.Fatalf("same boot: %+v, %v", held, err)
	}
}

// String names a move in test messages.
func (m move) String() string {
	switch m {
	case moveGrant:
		return "grant"
	case moveQueue:
		return "queue"
	case moveStay:
		return "stay"
	}
	return "move(" + strconv.Itoa(int(m)) + ")"
}

// String names an act in test messages.
func (a act) String() string {
	switch a {
	case actTry:
		return "try"
	case actStall:
		return "stall"
	case actSleep:
		return "sleep"
	}
	return "act(" + strconv.Itoa(int(a)) + ")"
}
