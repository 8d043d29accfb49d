package shards

import (
	"strconv"
	"strings"
)

// Ranges writes shard numbers, sorted, as runs: [0 1 2 3 7] is "0-3,7"
// ("" for none).
func Ranges(ns []int) string {
	var b []string
	for i := 0; i < len(ns); {
		j := i
		for j+1 < len(ns) && ns[j+1] == ns[j]+1 {
			j++
		}
		if j > i {
			b = append(b, strconv.Itoa(ns[i])+"-"+strconv.Itoa(ns[j]))
		} else {
			b = append(b, strconv.Itoa(ns[i]))
		}
		i = j + 1
	}
	return strings.Join(b, ",")
}
