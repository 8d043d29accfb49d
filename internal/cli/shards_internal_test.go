package cli

import (
	"reflect"
	"testing"

	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/shards"
)

// TestShardsViewOf: fence shards show's view of a group from its locks:
// held members and shards only, shards in order, each member's count and
// owned shards sorted, a drained member marked, names that are not a
// member or a shard (or another group's) left out.
func TestShardsViewOf(t *testing.T) {
	held := func(name, holder string, token uint64) coord.LockInfo {
		return coord.LockInfo{Name: name, Held: true, Holder: holder, Token: token}
	}
	for _, tc := range []struct {
		name    string
		st      shards.Settings
		infos   []coord.LockInfo
		members map[string]int // id: shards
		drained []string
		shards  []int
		owns    map[string][]int
	}{
		{name: "empty", members: map[string]int{}, owns: map[string][]int{}},
		{
			name: "two members",
			infos: []coord.LockInfo{
				held("g/members/a", "a", 1), held("g/members/b", "b", 2),
				held("g/shard/2", "a", 5), held("g/shard/0", "b", 3), held("g/shard/1", "a", 4),
			},
			members: map[string]int{"a": 2, "b": 1},
			shards:  []int{0, 1, 2},
			owns:    map[string][]int{"a": {1, 2}, "b": {0}},
		},
		{
			name: "free, odd and foreign names left out; drained marked",
			st:   shards.Settings{Drained: []string{"b"}},
			infos: []coord.LockInfo{
				held("g/members/a", "a", 1), held("g/members/b", "b", 2), {Name: "g/members/c"},
				held("g/shard/01", "a", 3), held("g/shard/x", "a", 4), {Name: "g/shard/3"},
				held("g/shard/0", "a", 6), held("h/shard/1", "b", 7),
			},
			members: map[string]int{"a": 1, "b": 0},
			drained: []string{"b"},
			shards:  []int{0},
			owns:    map[string][]int{"a": {0}},
		},
		{
			// The lock list comes sorted by name: shard/10 before shard/2.
			name: "an owner whose member lease ended: its shards in number order too",
			infos: []coord.LockInfo{
				held("g/shard/10", "gone", 8), held("g/shard/2", "gone", 9),
			},
			members: map[string]int{},
			shards:  []int{2, 10},
			owns:    map[string][]int{"gone": {2, 10}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := shardsViewOf("g", tc.st, tc.infos)
			members, drained := map[string]int{}, []string(nil)
			for _, m := range v.Members {
				members[m.ID] = m.Shards
				if m.Drained {
					drained = append(drained, m.ID)
				}
			}
			var got []int
			for _, s := range v.Shards {
				got = append(got, s.Shard)
			}
			if !reflect.DeepEqual(members, tc.members) || !reflect.DeepEqual(drained, tc.drained) ||
				!reflect.DeepEqual(got, tc.shards) || !reflect.DeepEqual(v.Map, tc.owns) {
				t.Errorf("members %v drained %v shards %v owns %v; want %v %v %v %v", members, drained, got, v.Map, tc.members, tc.drained, tc.shards, tc.owns)
			}
		})
	}
}
