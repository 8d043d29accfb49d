package tui

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/fence-dev/fence/internal/output"
	"github.com/fence-dev/fence/tui/internal/store"
)

// groupOf says which `fence shards` group a lock belongs to: name is
// GROUP/members/ID (a member) or GROUP/shard/N (a shard).
func groupOf(name string) (group, member string, shard int, ok bool) {
	if i := strings.LastIndex(name, "/members/"); i > 0 {
		id := name[i+len("/members/"):]
		if id != "" && !strings.Contains(id, "/") {
			return name[:i], id, -1, true
		}
	}
	if i := strings.LastIndex(name, "/shard/"); i > 0 {
		s := name[i+len("/shard/"):]
		if n, err := strconv.Atoi(s); err == nil && n >= 0 && strconv.Itoa(n) == s {
			return name[:i], "", n, true
		}
	}
	return "", "", 0, false
}

// groupSummary is the details view's word on a lock of a group, from the
// rows the dashboard lists: for a member, the shards it owns of those held
// (its part of the map) and the live members; for a shard, its owner.
// "" for another lock.
func groupSummary(rows []*store.Row, name string) string {
	group, member, shard, ok := groupOf(name)
	if !ok {
		return ""
	}
	members, held := 0, 0
	var owner string
	var mine []int
	for _, r := range rows {
		g, id, n, ok := groupOf(r.Info.Name)
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
