package cli

import (
	"bytes"
	"context"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fence-dev/fence/internal/exitcode"
)

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
	silent := silentEndpoint(t)
	for _, tc := range []struct {
		args []string
		want string
		max  time.Duration
	}{
		{nil, "did not answer within 2s", 4 * time.Second},
		{[]string{"--dial-timeout", "2500ms"}, "did not answer within 2.5s", 4500 * time.Millisecond},
	} {
		var out, errOut bytes.Buffer
		ios := Test(&out, &errOut)
		ios.SetStdoutTTY(true)
		start := time.Now()
		code := Run(context.Background(), append(append([]string{"--endpoints", silent}, tc.args...), "top"), ios)
		elapsed := time.Since(start)
		if code != exitcode.Failure || !strings.Contains(errOut.String(), tc.want) {
			t.Errorf("%q: exit %d, stderr %q; want %q", tc.args, code, errOut.String(), tc.want)
		}
		if elapsed > tc.max {
			t.Errorf("%q: gave up after %v", tc.args, elapsed)
		}
	}
}

// silentEndpoint takes connections and never answers them.
func silentEndpoint(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return ln.Addr().String()
}
