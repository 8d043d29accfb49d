package shards

import "testing"

func TestRanges(t *testing.T) {
	for _, c := range []struct {
		ns   []int
		want string
	}{
		{nil, ""}, {[]int{5}, "5"}, {[]int{0, 1, 2, 3, 7}, "0-3,7"}, {[]int{1, 3, 5}, "1,3,5"},
		{[]int{0, 1, 3, 4, 63}, "0-1,3-4,63"},
	} {
		if got := Ranges(c.ns); got != c.want {
			t.Errorf("Ranges(%v) = %q, want %q", c.ns, got, c.want)
		}
	}
}
