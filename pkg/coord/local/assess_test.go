package local

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/fence-dev/fence/internal/proc"
	"github.com/fence-dev/fence/pkg/clock"
)

// facts are process facts of a test's making.
type facts struct {
	foreign    bool           // the holder's PID namespace is another
	live       map[int]bool   // by PID
	members    []proc.ID      // of the command's group
	membersErr error          // reading them fails
	desc       []proc.ID      // of the supervisors
	descErr    error          // reading them fails
	read       map[string]int // what was read, how often
}

func (f *facts) note(what string) {
	if f.read == nil {
		f.read = map[string]int{}
	}
	f.read[what]++
}

func (f *facts) ours(*holder) bool { return !f.foreign }

func (f *facts) alive(id proc.ID) bool {
	f.note("alive")
	return f.live[id.PID]
}

func (f *facts) groupMembers(g proc.ID) ([]proc.ID, error) {
	f.note("group")
	return f.members, f.membersErr
}

func (f *facts) descendants(sup []proc.ID) ([]proc.ID, error) {
	f.note("descendants")
	return f.desc, f.descErr
}

// TestJudge: the takeover decision for every kind of holder, on process
// facts given by the table: whether the lease is live, free for a
// successor, or leaves a command to be killed first; what a waiter waits
// for; and what was read of /proc to decide (the group only when it can
// matter, the supervisors' descendants only for a lease that ended before
// its group was recorded).
func TestJudge(t *testing.T) {
	now := clock.Boot(100 * time.Second)
	later, earlier := now.Add(5*time.Second), now.Add(-time.Second)
	fence, wd := proc.ID{PID: 10, Start: 1}, proc.ID{PID: 11, Start: 2}
	leader, child := proc.ID{PID: 20, Start: 3}, proc.ID{PID: 21, Start: 4}
	group := &proc.ID{PID: 20, Start: 3}
	both := []int{10, 11}
	h := func(expires clock.Boot, revoked bool, pids []proc.ID, g *proc.ID) *holder {
		return &holder{ExpiresAt: expires, Revoked: revoked, PIDs: pids, Group: g, PIDNS: "pid:[1]"}
	}
	sups := []proc.ID{fence, wd}
	errProc := errors.New("permission denied")
	for _, c := range []struct {
		name string
		h    *holder
		f    facts
		live []int // PIDs alive
		want verdict
		err  string // in the error
		read string // what was read of /proc beyond liveness: "", "group", "descendants", "group descendants"
	}{
		{name: "released", h: nil, want: verdict{free: true, why: "was released"}},

		// Another PID namespace: the TTL alone, nothing read.
		{name: "foreign, live", h: h(later, false, sups, group), f: facts{foreign: true},
			want: verdict{live: true, until: later}},
		{name: "foreign, expired", h: h(earlier, false, sups, group), f: facts{foreign: true},
			want: verdict{free: true, why: "expired"}},
		{name: "foreign, revoked", h: h(later, true, sups, group), f: facts{foreign: true},
			want: verdict{free: true, why: "was revoked"}},
		{name: "foreign, revoked and expired", h: h(earlier, true, sups, group), f: facts{foreign: true},
			want: verdict{free: true, why: "was revoked"}},

		// fence acquire: no process attached.
		{name: "unattached, live", h: h(later, false, nil, nil),
			want: verdict{live: true, until: later}},
		{name: "unattached, expiring now", h: h(now, false, nil, nil),
			want: verdict{free: true, why: "expired"}},
		{name: "unattached, revoked", h: h(later, true, nil, nil),
			want: verdict{free: true, why: "was revoked"}},

		// fence run, its supervisors alive.
		{name: "supervised, live", h: h(later, false, sups, group), live: both,
			want: verdict{live: true, until: later, waitOn: sups}},
		{name: "supervised by one, live", h: h(later, false, sups, group), live: []int{11},
			want: verdict{live: true, until: later, waitOn: []proc.ID{wd}}},
		{name: "supervised, expired, group runs", h: h(earlier, false, sups, group), live: both,
			f:    facts{members: []proc.ID{leader, child}},
			want: verdict{kill: true, pgid: 20, group: []proc.ID{leader, child}, waitOn: []proc.ID{leader, child}, why: "expired"}, read: "group"},
		{name: "supervised, expired, group gone", h: h(earlier, false, sups, group), live: both,
			want: verdict{free: true, why: "expired"}, read: "group"},
		{name: "supervised, revoked, group runs", h: h(later, true, sups, group), live: both,
			f:    facts{members: []proc.ID{leader}},
			want: verdict{until: later, waitOn: []proc.ID{fence, wd, leader}, why: "was revoked"}, read: "group"},
		{name: "supervised, revoked and expired, group runs", h: h(earlier, true, sups, group), live: both,
			f:    facts{members: []proc.ID{leader}},
			want: verdict{kill: true, pgid: 20, group: []proc.ID{leader}, waitOn: []proc.ID{leader}, why: "was revoked"}, read: "group"},
		{name: "supervised, revoked, group gone", h: h(later, true, sups, group), live: both,
			want: verdict{free: true, why: "was revoked"}, read: "group"},

		// fence run, its supervisors gone.
		{name: "abandoned", h: h(later, false, sups, group),
			want: verdict{free: true, why: "was abandoned: its processes are gone"}, read: "group"},
		{name: "abandoned before its group", h: h(later, false, sups, nil),
			want: verdict{free: true, why: "was abandoned: its processes are gone"}},
		{name: "abandoned, expired", h: h(earlier, false, sups, group),
			want: verdict{free: true, why: "was abandoned: its processes are gone"}, read: "group"},
		{name: "unsupervised, group runs", h: h(later, false, sups, group), f: facts{members: []proc.ID{leader}},
			want: verdict{live: true, until: later, waitOn: []proc.ID{leader}}, read: "group"},
		{name: "unsupervised, expired, group runs", h: h(earlier, false, sups, group), f: facts{members: []proc.ID{leader}},
			want: verdict{kill: true, pgid: 20, group: []proc.ID{leader}, waitOn: []proc.ID{leader}, why: "expired"}, read: "group"},
		{name: "unsupervised, revoked, group runs", h: h(later, true, sups, group), f: facts{members: []proc.ID{leader}},
			want: verdict{kill: true, pgid: 20, group: []proc.ID{leader}, waitOn: []proc.ID{leader}, why: "was revoked"}, read: "group"},
		{name: "only a group, live", h: h(later, false, nil, group), f: facts{members: []proc.ID{leader}},
			want: verdict{live: true, until: later, waitOn: []proc.ID{leader}}, read: "group"},
		{name: "only a group, gone", h: h(later, false, nil, group),
			want: verdict{free: true, why: "was abandoned: its processes are gone"}, read: "group"},

		// Ended before the command's group was recorded.
		{name: "revoked before its group", h: h(later, true, sups, nil), live: both,
			want: verdict{until: later, waitOn: sups, why: "was revoked"}},
		{name: "expired before its group, a command runs", h: h(earlier, false, sups, nil), live: []int{10},
			f:    facts{desc: []proc.ID{leader, child}},
			want: verdict{kill: true, group: []proc.ID{leader, child}, waitOn: []proc.ID{leader, child}, why: "expired"}, read: "descendants"},
		{name: "revoked and expired before its group, a command runs", h: h(earlier, true, sups, nil), live: both,
			f:    facts{desc: []proc.ID{leader}},
			want: verdict{kill: true, group: []proc.ID{leader}, waitOn: []proc.ID{leader}, why: "was revoked"}, read: "descendants"},
		{name: "expired before its group, no command", h: h(earlier, false, sups, nil), live: both,
			want: verdict{free: true, why: "expired"}, read: "descendants"},

		// /proc cannot be read.
		{name: "group unreadable", h: h(earlier, false, sups, group), live: both, f: facts{membersErr: errProc},
			err: "cannot read the processes of process group 20: permission denied", read: "group"},
		{name: "descendants unreadable", h: h(earlier, false, sups, nil), live: both, f: facts{descErr: errProc},
			err: "cannot read the processes started by the lease's supervisors: permission denied", read: "descendants"},
	} {
		f := c.f
		f.live = map[int]bool{}
		for _, pid := range c.live {
			f.live[pid] = true
		}
		v, err := judge(c.h, now, &f)
		switch {
		case c.err != "":
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: %+v, %v; want an error saying %q", c.name, v, err, c.err)
			}
		case err != nil:
			t.Errorf("%s: %v", c.name, err)
		case !reflect.DeepEqual(v, c.want):
			t.Errorf("%s:\n\tgot  %+v\n\twant %+v", c.name, v, c.want)
		}
		var read []string
		for _, what := range []string{"group", "descendants"} {
			if f.read[what] > 0 {
				read = append(read, what)
			}
		}
		if got := strings.Join(read, " "); got != c.read {
			t.Errorf("%s: read %q of /proc, want %q", c.name, got, c.read)
		}
		if c.h != nil && (c.f.foreign || c.h.PIDs == nil) && f.read["alive"] > 0 {
			t.Errorf("%s: checked %d processes", c.name, f.read["alive"])
		}
	}
}
