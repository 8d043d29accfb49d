package monitor

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/fence-dev/fence/internal/cli"
	"github.com/fence-dev/fence/internal/exitcode"
	"github.com/fence-dev/fence/internal/faultproxy"
	"github.com/fence-dev/fence/tui"
)

// TestDefaultRefresh: fence top's --refresh default, which the fence binary
// states without linking the dashboard, is the dashboard's.
func TestDefaultRefresh(t *testing.T) {
	if cli.DefaultTopRefresh != tui.DefaultRefresh {
		t.Fatalf("cli.DefaultTopRefresh %v, tui.DefaultRefresh %v", cli.DefaultTopRefresh, tui.DefaultRefresh)
	}
}

// TestTopUnreachableBounded: fence top on a coordinator that takes the
// connection and never answers gives up after topDialTimeout (2s), not the
// default dial timeout (5s); an explicit --dial-timeout is kept.
func TestTopUnreachableBounded(t *testing.T) {
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "FENCE_") {
			t.Setenv(k, "")
			os.Unsetenv(k)
		}
	}
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	silent := faultproxy.Silent(t)
	for _, tc := range []struct {
		args []string
		want string
		max  time.Duration
	}{
		{nil, "did not answer within 2s", 4 * time.Second},
		{[]string{"--dial-timeout", "2500ms"}, "did not answer within 2.5s", 4500 * time.Millisecond},
	} {
		var out, errOut bytes.Buffer
		ios := cli.Test(&out, &errOut)
		ios.SetStdoutTTY(true)
		start := time.Now()
		code := cli.RunWith(context.Background(), append(append([]string{"--endpoints", silent}, tc.args...), "top"), ios, Hooks())
		elapsed := time.Since(start)
		if code != exitcode.Failure || !strings.Contains(errOut.String(), tc.want) {
			t.Errorf("%q: exit %d, stderr %q; want %q", tc.args, code, errOut.String(), tc.want)
		}
		if elapsed > tc.max {
			t.Errorf("%q: gave up after %v", tc.args, elapsed)
		}
	}
}
