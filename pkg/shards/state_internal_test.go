package shards

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/guard"
	"github.com/fence-dev/fence/pkg/internal/coordkit"
)

func held(name, holder string) coord.LockInfo {
	return coord.LockInfo{Name: name, Held: true, Holder: holder}
}

func free(name string) coord.LockInfo { return coord.LockInfo{Name: name} }

// TestViewSee: what each of the group's locks does to the view, in
// order: members come and go (never the member itself), shard locks'
// holders, locks of other groups and out-of-range shards change nothing.
func TestViewSee(t *testing.T) {
	v := newView("g", "me", 4)
	for i, c := range []struct {
		info    coord.LockInfo
		kind    string
		changed bool
		members []string
		owner   []string
	}{
		{held("g/members/b", "b"), "member", true, []string{"b", "me"}, []string{"", "", "", ""}},
		{held("g/members/b", "b"), "member", false, []string{"b", "me"}, []string{"", "", "", ""}}, // seen again
		{held("g/members/me", "me"), "member", false, []string{"b", "me"}, []string{"", "", "", ""}},
		{free("g/members/me"), "member", false, []string{"b", "me"}, []string{"", "", "", ""}}, // self stays
		{held("g/shard/2", "b"), "shard", false, []string{"b", "me"}, []string{"", "", "b", ""}},
		{held("g/shard/9", "b"), "shard", false, []string{"b", "me"}, []string{"", "", "b", ""}}, // not of N
		{held("g/shard/02", "b"), "", false, []string{"b", "me"}, []string{"", "", "b", ""}},     // not a shard's name
		{held("h/shard/1", "b"), "", false, []string{"b", "me"}, []string{"", "", "b", ""}},      // another group
		{held("g/settings", "op"), "settings", false, []string{"b", "me"}, []string{"", "", "b", ""}},
		{free("g/shard/2"), "shard", false, []string{"b", "me"}, []string{"", "", "", ""}},
		{free("g/members/b"), "member", true, []string{"me"}, []string{"", "", "", ""}},
		{free("g/members/c"), "member", false, []string{"me"}, []string{"", "", "", ""}},  // never seen
		{held("g/members/a/b", "x"), "", false, []string{"me"}, []string{"", "", "", ""}}, // not a member id
	} {
		kind, _, changed := v.see(c.info)
		if kind != c.kind || changed != c.changed || !slices.Equal(v.memberList(), c.members) || !slices.Equal(v.owner, c.owner) {
			t.Errorf("%d: see(%s held %v) = %q, changed %v; members %v, owner %q; want %q, %v, %v, %q",
				i, c.info.Name, c.info.Held, kind, changed, v.memberList(), v.owner, c.kind, c.changed, c.members, c.owner)
		}
	}

	// A reset forgets what the listing lacks; a relist (the retry) only
	// adds to the view.
	v.see(held("g/members/b", "b"))
	v.see(held("g/shard/1", "b"))
	v.owner[3] = "?"
	v.reset([]coord.LockInfo{held("g/members/c", "c"), held("g/shard/0", "c")})
	if !slices.Equal(v.memberList(), []string{"c", "me"}) || !slices.Equal(v.owner, []string{"c", "", "", ""}) {
		t.Errorf("after reset: members %v, owner %q", v.memberList(), v.owner)
	}
	v.relist([]coord.LockInfo{held("g/members/d", "d"), held("g/shard/3", "d")})
	if !slices.Equal(v.memberList(), []string{"c", "d", "me"}) || !slices.Equal(v.owner, []string{"c", "", "", "d"}) {
		t.Errorf("after relist: members %v, owner %q", v.memberList(), v.owner)
	}
}

// TestClaims: a shard is asked for when the map gives it to this member,
// the member does not hold it, no acquisition of it is in flight and its
// lock is seen free; "?" (busy, or failed until the retry) is not free.
func TestClaims(t *testing.T) {
	s := &Shard{Number: 1}
	for _, c := range []struct {
		name      string
		target    []string
		owner     []string
		held      map[int]*Shard
		acquiring map[int]bool
		want      []int
	}{
		{"no map yet", nil, []string{"", "", "", ""}, nil, nil, nil},
		{"all mine and free", []string{"me", "me", "me", "me"}, []string{"", "", "", ""}, nil, nil, []int{0, 1, 2, 3}},
		{"others' shards", []string{"me", "b", "me", "b"}, []string{"", "", "", ""}, nil, nil, []int{0, 2}},
		{"held already", []string{"me", "me", "b", "b"}, []string{"", "me", "", ""}, map[int]*Shard{1: s}, nil, []int{0}},
		{"held, its lock seen free", []string{"me", "me", "b", "b"}, []string{"", "", "", ""}, map[int]*Shard{1: s}, nil, []int{0}},
		{"in flight", []string{"me", "me", "b", "b"}, []string{"", "", "", ""}, nil, map[int]bool{0: true}, []int{1}},
		{"busy: the old owner still holds it", []string{"me", "me", "b", "b"}, []string{"b", "", "", ""}, nil, nil, []int{1}},
		{"not known until the retry", []string{"me", "me", "b", "b"}, []string{"?", "", "", ""}, nil, nil, []int{1}},
	} {
		v := newView("g", "me", 4)
		copy(v.owner, c.owner)
		if got := claims(c.target, "me", c.held, c.acquiring, &v); !slices.Equal(got, c.want) {
			t.Errorf("%s: claims %v, want %v", c.name, got, c.want)
		}
	}
}

// TestAcquireOutcome: every answer to an acquisition, in every state.
func TestAcquireOutcome(t *testing.T) {
	busy := &coordkit.LimitError{Lock: "g/shard/0", Limit: coord.Limit{Name: "g/shard/0"}} // frozen: busy
	down := fmt.Errorf("%w: no leader", coord.ErrUnavailable)
	for _, c := range []struct {
		err                error
		freed, mine, ended bool
		want               afterAcquire
	}{
		{nil, false, true, false, keepShard},
		{nil, true, true, false, keepShard},
		{nil, false, false, false, giveBack}, // the map moved it meanwhile
		{nil, false, true, true, giveBack},   // the member ended meanwhile
		{coord.ErrBusy, false, true, false, waitFree},
		{busy, false, true, false, heldBack},
		{busy, true, true, false, heldBack}, // freed, but frozen: asking again at once is refused again
		{busy, false, true, true, waitFree},
		{coord.ErrBusy, true, true, false, askAgain}, // freed while asked for
		{coord.ErrBusy, false, true, true, waitFree},
		{down, false, true, false, retryLater},
		{down, true, false, false, retryLater},
		{down, false, true, true, dropped},
		{context.Canceled, false, true, true, dropped},
	} {
		if got := acquireOutcome(c.err, c.freed, c.mine, c.ended); got != c.want {
			t.Errorf("acquireOutcome(%v, freed %v, mine %v, ended %v) = %v, want %v", c.err, c.freed, c.mine, c.ended, got, c.want)
		}
	}
}

// TestStillHeldBack: after one read of the limits, a shard refused by a
// limit is asked for again when no limit binds it any more (thawed, or a
// limit that allows a holder), and forgotten when it is no longer this
// member's to take.
func TestStillHeldBack(t *testing.T) {
	frozen := func(name string, prefix bool) coord.Limit { return coord.Limit{Name: name, Prefix: prefix, Max: 0} }
	target := []string{"me", "me", "me", "b", "me"}
	heldBack := map[int]bool{0: true, 1: true, 2: true, 3: true, 4: true}
	held := map[int]*Shard{4: {Number: 4}}
	for _, c := range []struct {
		name string
		ls   []coord.Limit
		want []int
	}{
		{"all thawed", nil, nil},
		{"one still frozen", []coord.Limit{frozen("g/shard/1", false)}, []int{1}},
		{"the group frozen", []coord.Limit{frozen("g/", true)}, []int{0, 1, 2}},
		{"another group frozen", []coord.Limit{frozen("h/", true), frozen("g/shard/10", false)}, nil},
		{"limited to one", []coord.Limit{{Name: "g/", Prefix: true, Max: 1}}, nil},
		{"frozen under a wider limit", []coord.Limit{{Name: "g/", Prefix: true, Max: 5}, frozen("g/shard/2", false)}, []int{2}},
	} {
		got := stillHeldBack(heldBack, target, "me", held, c.ls, "g")
		var ks []int
		for k := range got {
			ks = append(ks, k)
		}
		slices.Sort(ks)
		if !slices.Equal(ks, c.want) {
			t.Errorf("%s: still held back %v, want %v", c.name, ks, c.want)
		}
	}
}

// TestReads: one read at a time; asked for during one, one more follows
// (however often it was asked); a failed one is made again at the retry,
// once. A read starts when the settings reader calls the guard's Get;
// "ok" and "fail" answer the running one, and the loop takes in the answer.
func TestReads(t *testing.T) {
	g := &heldGet{started: make(chan struct{}), answer: make(chan error)}
	m := &Member{group: "g", opts: options{Guard: g, Settle: time.Hour}, ev: make(chan func(*memberLoop), 1), done: make(chan struct{})}
	m.ctx, m.cancel = context.WithCancelCause(context.Background())
	defer m.cancel(nil)
	defer close(m.done)
	l := newLoop(m)
	defer l.settling.Stop()
	defer l.retrying.Stop()
	go m.reader(l.reads)
	type op struct {
		do   string // ask, ok, fail, retry
		want bool   // a read starts
	}
	for i, o := range []op{
		{"retry", false}, // nothing failed
		{"ask", true},
		{"ask", false}, {"ask", false}, // during the read: one follows
		{"ok", true},
		{"fail", false},
		{"ask", true},
		{"retry", false}, // a read runs: the retry's follows it
		{"ok", true},
		{"ok", false},
		{"retry", false}, // already made
		{"ask", true},
		{"fail", false},
		{"retry", true},
		{"ok", false},
	} {
		switch o.do {
		case "ask":
			l.readSettings()
		case "ok", "fail":
			var err error
			if o.do == "fail" {
				err = errors.New("unreachable")
			}
			g.answer <- err
			(<-m.ev)(l)
		case "retry":
			l.retryRead()
		}
		wait := 100 * time.Millisecond // a read that should not start: enough to see it start
		if o.want {
			wait = 5 * time.Second
		}
		var got bool
		select {
		case <-g.started:
			got = true
		case <-time.After(wait):
		}
		if got != o.want {
			t.Fatalf("op %d (%s): start %v, want %v", i, o.do, got, o.want)
		}
	}
}

// heldGet is a guard whose Get tells that it started and returns what it
// is given (no value, or the error).
type heldGet struct {
	guard.Guard
	started chan struct{}
	answer  chan error
}

func (g *heldGet) Get(ctx context.Context, key string) (guard.Value, error) {
	g.started <- struct{}{}
	if err := <-g.answer; err != nil {
		return guard.Value{}, err
	}
	return guard.Value{}, guard.ErrNotFound
}

// TestWake: the settle time restarts at each change; a negative settle
// is at once; the first armed time comes first; what came is disarmed;
// another failure pushes the retry back. (On real timers: the lower bounds
// are exact, a timer never fires early; the upper ones are loose.)
func TestWake(t *testing.T) {
	const settle = 200 * time.Millisecond
	l := newLoop(&Member{opts: options{Settle: settle}})
	defer l.settling.Stop()
	defer l.retrying.Stop()
	fired := func(within time.Duration) string {
		select {
		case <-l.settling.C:
			return "settle"
		case <-l.retrying.C:
			return "retry"
		case <-time.After(within):
			return ""
		}
	}
	if f := fired(100 * time.Millisecond); f != "" {
		t.Fatalf("nothing armed: %s fired", f)
	}
	l.arm()
	time.Sleep(100 * time.Millisecond)
	changed := time.Now()
	l.arm() // a change restarts it
	l.armRetry()
	if f := fired(5 * time.Second); f != "settle" || time.Since(changed) < settle {
		t.Errorf("settle restarted, retry after it: %q fired %v after the change", f, time.Since(changed))
	}
	if f := fired(5 * time.Second); f != "retry" || time.Since(changed) < retryAfter {
		t.Errorf("after the settle: %q fired %v after the retry was armed, want the retry at %v", f, time.Since(changed), retryAfter)
	}
	if f := fired(100 * time.Millisecond); f != "" {
		t.Errorf("all came: %s fired again", f)
	}
	l.m.opts.Settle = -1
	l.arm()
	if f := fired(time.Second); f != "settle" {
		t.Errorf("negative settle: %q fired, want the settle at once", f)
	}
	l.arm()
	l.armRetry()
	time.Sleep(retryAfter + 100*time.Millisecond)
	if a, b := fired(time.Second), fired(time.Second); a == b || a == "" || b == "" {
		t.Errorf("both due: %q and %q fired, want each once", a, b)
	}
	l.armRetry()
	time.Sleep(500 * time.Millisecond)
	again := time.Now()
	l.armRetry() // another failure pushes it back
	if f := fired(5 * time.Second); f != "retry" || time.Since(again) < retryAfter {
		t.Errorf("retry re-armed: %q fired %v after, want %v", f, time.Since(again), retryAfter)
	}
}

// TestPlan: the map is Target's, and the reason says what changed.
func TestPlan(t *testing.T) {
	one := "b"
	var was applied
	for i, c := range []struct {
		ms     []string
		st     Settings
		reason string
	}{
		{[]string{"a"}, Settings{}, "joined: members a"},
		{[]string{"a", "b"}, Settings{}, "members a → a,b"},
		{[]string{"a", "b"}, Settings{Drained: []string{"a"}}, "settings: drained a, parallel"},
		{[]string{"a", "b"}, Settings{Drained: []string{"a"}, Serial: &one}, "settings: drained a, serial on b"},
		{[]string{"a", "b"}, Settings{Serial: new(string)}, "settings: serial"},
		{[]string{"a", "b"}, Settings{Serial: new(string)}, "members a,b → a,b"}, // nothing changed (a settle after a flap)
		{[]string{"b"}, Settings{}, "members a,b → b"},                           // members and settings: the members
	} {
		target, now, reason := plan(4, c.ms, c.st, was)
		if reason != c.reason {
			t.Errorf("%d: reason %q, want %q", i, reason, c.reason)
		}
		if want := Target(4, c.ms, c.st); !slices.Equal(target, want) {
			t.Errorf("%d: map %v, want Target's %v", i, target, want)
		}
		was = now
	}
}

// TestAwayFrom: the held shards with a live context that the map gives to
// another member, in order; one whose context ended is not given up again.
func TestAwayFrom(t *testing.T) {
	sh := func(n int, live bool) *Shard {
		s := &Shard{Number: n}
		s.ctx, s.cancel = context.WithCancelCause(context.Background())
		if !live {
			s.cancel(errors.New("lost"))
		}
		return s
	}
	heldShards := map[int]*Shard{0: sh(0, true), 1: sh(1, true), 2: sh(2, false), 3: sh(3, true), 5: sh(5, true)}
	target := []string{"b", "me", "b", "c", "me", "b"}
	var got []int
	for _, s := range awayFrom(target, "me", heldShards) {
		got = append(got, s.Number)
	}
	if want := []int{0, 3, 5}; !slices.Equal(got, want) {
		t.Errorf("awayFrom: %v, want %v", got, want)
	}
	if a := awayFrom(target, "me", nil); len(a) != 0 {
		t.Errorf("nothing held: %v", a)
	}
}

func (a afterAcquire) String() string {
	return [...]string{"keep", "give back", "ask again", "held back", "wait for the release", "retry later", "dropped"}[a]
}
