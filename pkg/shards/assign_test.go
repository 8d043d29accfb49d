package shards

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestAssignBalancedDeterministic: every shard has an owner, the spread is
// at most one, and the map does not depend on the members' order.
func TestAssignBalancedDeterministic(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 200 {
		n, m := 1+r.IntN(300), 1+r.IntN(12)
		var ms []string
		for i := range m {
			ms = append(ms, fmt.Sprintf("w%d-%d", i, r.IntN(1000)))
		}
		a := assign(n, ms)
		rev := slices.Clone(ms)
		slices.Reverse(rev)
		if !slices.Equal(a, assign(n, rev)) {
			t.Fatalf("n=%d members %v: the map depends on their order", n, ms)
		}
		count := map[string]int{}
		for s, id := range a {
			if id == "" {
				t.Fatalf("n=%d m=%d: shard %d has no owner", n, m, s)
			}
			count[id]++
		}
		lo, hi := n, 0
		for _, id := range ms {
			lo, hi = min(lo, count[id]), max(hi, count[id])
		}
		if hi-lo > 1 {
			t.Fatalf("n=%d m=%d: spread %d..%d", n, m, lo, hi)
		}
	}
}

// TestAssignMoves measures how many shards move when a member joins or
// leaves, against the least possible (what the joiner takes, what the
// leaver had), and holds it to 60% above that on average (measured: 1.2x
// with 4 and 10 members, 1.5x with 7 members of 64 shards, where the bound
// of 9 or 10 shards each weighs most). Moving every shard (modulo hashing)
// or ignoring the bound would fail it.
func TestAssignMoves(t *testing.T) {
	for _, c := range []struct{ n, m int }{{64, 4}, {64, 7}, {1000, 10}} {
		var joinMoved, joinLeast, leaveMoved, leaveLeast int
		for trial := range 20 {
			var ms []string
			for i := range c.m {
				ms = append(ms, fmt.Sprintf("t%d-m%d", trial, i))
			}
			a := assign(c.n, ms)
			b := assign(c.n, append(slices.Clone(ms), "joiner"))
			for s := range a {
				if a[s] != b[s] {
					joinMoved++
					if b[s] == "joiner" {
						joinLeast++
					}
				}
			}
			gone := ms[trial%c.m]
			rest := slices.DeleteFunc(slices.Clone(ms), func(id string) bool { return id == gone })
			d := assign(c.n, rest)
			for s := range a {
				if a[s] != d[s] {
					leaveMoved++
				}
				if a[s] == gone {
					leaveLeast++
				}
			}
		}
		t.Logf("%d shards, %d members: a join moves %.2fx the least, a leave %.2fx",
			c.n, c.m, float64(joinMoved)/float64(joinLeast), float64(leaveMoved)/float64(leaveLeast))
		if joinMoved*10 > joinLeast*16 || leaveMoved*10 > leaveLeast*16 {
			t.Errorf("more than 60%% above the least: join %d/%d, leave %d/%d", joinMoved, joinLeast, leaveMoved, leaveLeast)
		}
	}
}

func TestTargetSettings(t *testing.T) {
	ms := []string{"a", "b", "c"}
	if got := of(Target(10, ms, Settings{Drained: []string{"b"}}), "b"); len(got) != 0 {
		t.Errorf("drained b owns %v", got)
	}
	one := ""
	if got := of(Target(10, ms, Settings{Serial: &one}), "a"); len(got) != 10 {
		t.Errorf("serial: a owns %v", got)
	}
	c := "c"
	if got := of(Target(10, ms, Settings{Serial: &c}), "c"); len(got) != 10 {
		t.Errorf("serial on c: c owns %v", got)
	}
	if got := of(Target(10, ms, Settings{Serial: &c, Drained: []string{"c"}}), "a"); len(got) != 10 {
		t.Errorf("serial on a drained c: a owns %v", got)
	}
}
