package shards

import (
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/internal/coordkit"
)

// The member's goroutine (Member.loop) decides with the pure functions of
// this file and performs what they decide: what it sees of the group
// (view), which shards to ask for (claims), what an acquisition's answer
// means (acquireOutcome), the map and why it changed (plan, awayFrom).

// retryAfter is how long a failed acquisition or settings read waits
// before it is tried again.
const retryAfter = time.Second

// view is what the member knows of the group from its watch and listings:
// the live members and the holder of each shard's lock.
type view struct {
	group, self string
	members     map[string]bool // always has self
	// owner is each shard lock's holder as seen: "" free, "?" not known
	// (an acquisition answered busy while it was seen free, or failed):
	// the lock's next release, the retry or a reset tells again.
	owner []string
}

func newView(group, self string, n int) view {
	return view{group: group, self: self, members: map[string]bool{self: true}, owner: make([]string, n)}
}

// see takes in one lock's state. It says which of the group's locks it is
// (parseLock's kind; k for a shard) and whether the set of members changed.
// The member's own lock never removes it: a member counts itself.
func (v *view) see(info coord.LockInfo) (kind string, k int, membersChanged bool) {
	kind, id, k := parseLock(v.group, info.Name)
	switch kind {
	case "member":
		was := v.members[id]
		if info.Held {
			v.members[id] = true
		} else if id != v.self {
			delete(v.members, id)
		}
		membersChanged = was != v.members[id]
	case "shard":
		if k < len(v.owner) {
			v.owner[k] = ""
			if info.Held {
				v.owner[k] = info.Holder
			}
		}
	}
	return kind, k, membersChanged
}

// reset replaces the view with a listing of the group's locks.
func (v *view) reset(infos []coord.LockInfo) {
	clear(v.members)
	v.members[v.self] = true
	clear(v.owner)
	v.relist(infos)
}

// relist takes in a listing's locks over the view.
func (v *view) relist(infos []coord.LockInfo) {
	for _, info := range infos {
		v.see(info)
	}
}

// free reports whether shard k's lock is seen free.
func (v *view) free(k int) bool { return k < len(v.owner) && v.owner[k] == "" }

// memberList is the live members in byte order.
func (v *view) memberList() []string {
	return slices.Sorted(maps.Keys(v.members))
}

// claims are the shards to ask for now, in ascending order: target gives
// them to self, self holds none of them (held), none is being asked for (a
// key of acquiring), and each lock is seen free (a busy lock is asked for
// at its release).
func claims(target []string, self string, held map[int]*Shard, acquiring map[int]bool, v *view) []int {
	var want []int
	for k, id := range target {
		if _, inFlight := acquiring[k]; id == self && held[k] == nil && !inFlight && v.free(k) {
			want = append(want, k)
		}
	}
	return want
}

// afterAcquire is what the answer to an acquisition of a shard means.
type afterAcquire uint8

const (
	// keepShard: taken, and the map in force still gives it to this
	// member: work on it.
	keepShard afterAcquire = iota
	// giveBack: taken, but meanwhile the map moved it away or the member
	// ended: release it at once.
	giveBack
	// askAgain: busy, but the watch saw the lock freed while it was asked
	// for: ask again at once.
	askAgain
	// heldBack: refused by an operator limit (fence freeze; a
	// *coordkit.LimitError): a thaw sends no event on the lock, so look again
	// at the retry, once the limits allow it (stillHeldBack).
	heldBack
	// waitFree: busy: ask again at the lock's next release.
	waitFree
	// retryLater: another error: ask again at the retry, retryAfter later
	// (not at once: a coordinator in trouble would be asked in a loop).
	retryLater
	// dropped: failed because the member ended: nothing more.
	dropped
)

// acquireOutcome decides on the answer err to an acquisition of a shard:
// freedMeanwhile, the watch saw its lock freed while it was asked for;
// mine, the map in force gives the shard to this member; ended, the member
// has ended.
func acquireOutcome(err error, freedMeanwhile, mine, ended bool) afterAcquire {
	var limited *coordkit.LimitError
	switch {
	case errors.As(err, &limited) && !ended:
		return heldBack
	case err == nil && mine && !ended:
		return keepShard
	case err == nil:
		return giveBack
	case errors.Is(err, coord.ErrBusy) && freedMeanwhile:
		return askAgain
	case errors.Is(err, coord.ErrBusy):
		return waitFree
	case ended:
		return dropped
	}
	return retryLater
}

// stillHeldBack is the shards of heldBack that are still this member's to
// take (target gives them to self, it does not hold them) and that the
// limits ls still hold back (a free lock would get no holder under them).
// Only those are not asked for at the retry; ls is one read of the limits
// for all of them, where asking for each would cost a frozen group an
// acquisition of every shard every second.
func stillHeldBack(heldBack map[int]bool, target []string, self string, held map[int]*Shard, ls []coord.Limit, group string) map[int]bool {
	out := map[int]bool{}
	for k := range heldBack {
		if k >= len(target) || target[k] != self || held[k] != nil {
			continue
		}
		if l := coordkit.EffectiveLimit(ls, shardLock(group, k)); l != nil && !coordkit.Allows(l, 0) {
			out[k] = true
		}
	}
	return out
}

// applied is what the map in force was computed from.
type applied struct {
	members  []string // nil: no map yet
	settings string   // settingsKey of its settings
}

// plan is the map of n shards for the live members ms under st, and why it
// changed from the one computed from was: the join, the settings (same
// members), or the members before and after.
func plan(n int, ms []string, st Settings, was applied) (target []string, now applied, reason string) {
	now = applied{members: ms, settings: settingsKey(st)}
	switch {
	case was.members == nil:
		reason = "joined: members " + strings.Join(ms, ",")
	case slices.Equal(was.members, ms) && now.settings != was.settings:
		reason = "settings: " + describe(st)
	default:
		reason = "members " + strings.Join(was.members, ",") + " → " + strings.Join(ms, ",")
	}
	return Target(n, ms, st), now, reason
}

// awayFrom is the shards held with a live context that target gives to
// another member than self, in ascending order.
func awayFrom(target []string, self string, held map[int]*Shard) []*Shard {
	var away []*Shard
	for k, s := range held {
		if k < len(target) && target[k] != self && s.ctx.Err() == nil {
			away = append(away, s)
		}
	}
	slices.SortFunc(away, func(a, b *Shard) int { return a.Number - b.Number })
	return away
}

// settingsKey tells settings apart: nil and "" serial differ.
func settingsKey(st Settings) string {
	b, _ := json.Marshal(st)
	return string(b)
}

func describe(st Settings) string {
	var parts []string
	if len(st.Drained) > 0 {
		parts = append(parts, "drained "+strings.Join(st.Drained, ","))
	}
	if st.Serial != nil {
		if *st.Serial != "" {
			parts = append(parts, "serial on "+*st.Serial)
		} else {
			parts = append(parts, "serial")
		}
	} else {
		parts = append(parts, "parallel")
	}
	return strings.Join(parts, ", ")
}
