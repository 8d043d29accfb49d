package etcd

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/fence-dev/fence/pkg/coord"
)

// TestTokenOf: a token is the key's create revision, 1 to coord.MaxToken; a
// revision etcd never sends (0, negative) is refused, never token 0 or a
// wrapped one.
func TestTokenOf(t *testing.T) {
	for rev, want := range map[int64]uint64{1: 1, 42: 42, math.MaxInt64: coord.MaxToken} {
		if got, err := tokenOf("l", rev); err != nil || got != want {
			t.Errorf("tokenOf(%d) = %d, %v; want %d", rev, got, err, want)
		}
	}
	for _, rev := range []int64{0, -1, math.MinInt64} {
		got, err := tokenOf("l", rev)
		if !errors.Is(err, coord.ErrUnavailable) || got != 0 || !strings.Contains(err.Error(), `lock "l"`) {
			t.Errorf("tokenOf(%d) = %d, %v; want ErrUnavailable naming the lock", rev, got, err)
		}
	}
}
