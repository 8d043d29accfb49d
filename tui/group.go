package tui

import (
	"fmt"
	"slices"

	"github.com/fence-dev/fence/internal/lockkind"
	"github.com/fence-dev/fence/internal/output"
	"github.com/fence-dev/fence/tui/internal/store"
)

// groupSummary is the details view's word on a lock of a group, from the
// rows the dashboard lists: for a member, the shards it owns of those held
// (its part of the map) and the live members; for a shard, its owner.
// "" for another lock.
func groupSummary(rows []*store.Row, name string) string {
	group, member, shard, ok := lockkind.Group(name)
	if !ok {
		return ""
	}
	members, held := 0, 0
	var owner string
	var mine []int
	for _, r := range rows {
		g, id, n, ok := lockkind.Group(r.Info.Name)
		if !ok || g != group || !r.Info.Held {
			continue
		}
		if id != "" {
			members++
			continue
		}
		held++
		if r.Info.Holder == member && member != "" {
			mine = append(mine, n)
		}
		if n == shard && member == "" {
			owner = r.Info.Holder
		}
	}
	if member != "" {
		slices.Sort(mine)
		owns := "none"
		if len(mine) > 0 {
			owns = output.Ranges(mine)
		}
		return fmt.Sprintf("%s · owns %d/%d: %s · %d members", group, len(mine), held, owns, members)
	}
	if owner == "" {
		owner = "nobody"
	}
	return fmt.Sprintf("%s · shard %d of %d held · owner %s · %d members", group, shard, held, owner, members)
}
