package etcd_test

import (
	"strings"
	"testing"

	"github.com/fence-dev/fence/internal/etcdtest"
)

// TestServerVersions: every endpoint's member reports its version.
func TestServerVersions(t *testing.T) {
	t.Parallel()
	c, _ := openProxied(t, etcdtest.Start(t), 2)
	vs := c.ServerVersions(ctx(t))
	if len(vs) != 2 {
		t.Fatalf("ServerVersions = %+v", vs)
	}
	for _, v := range vs {
		if v.Err != nil || !strings.HasPrefix(v.Version, "3.") {
			t.Errorf("ServerVersions: %+v", v)
		}
	}
}
