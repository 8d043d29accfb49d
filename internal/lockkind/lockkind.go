// Package lockkind tells the locks of a `fence shards` group (package
// shards names them) from the others, for the readers that show them: the
// dashboard and the exporter.
package lockkind

import (
	"strconv"
	"strings"
)

// Group says which `fence shards` group a lock belongs to: name is
// GROUP/members/ID (a member: member is ID, shard -1) or GROUP/shard/N (a
// shard: member is "").
func Group(name string) (group, member string, shard int, ok bool) {
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
