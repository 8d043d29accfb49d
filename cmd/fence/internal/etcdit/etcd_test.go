// Package etcdit runs fence against real etcd servers (internal/etcdtest):
// the scripts of cmd/fence/testdata/etcd, TLS, authentication and watches.
// It is apart from cmd/fence so that only this test binary links an etcd
// server.
package etcdit

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rogpeppe/go-internal/testscript"
	clientv3 "go.etcd.io/etcd/client/v3"

	st "github.com/fence-dev/fence/cmd/fence/internal/scripttest"
	"github.com/fence-dev/fence/internal/etcdtest"
)

func TestMain(m *testing.M) {
	testscript.Main(m, st.Commands)
}

// etcdServers are the real etcd servers the etcd scripts run against.
type etcdServers struct {
	plain, tls, auth *etcdtest.Server
}

func startEtcd(t *testing.T) *etcdServers {
	t.Helper()
	s := &etcdServers{
		plain: etcdtest.Start(t),
		tls:   etcdtest.Start(t, etcdtest.WithTLS()),
		auth:  etcdtest.Start(t, etcdtest.WithAuth("rootpw")),
	}
	// On the auth server: "fence" may read and write /fence/; "nobody" may
	// log in but has no permission; "reader" may only read /fence/.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := s.auth.Client(t)
	must := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	end := clientv3.GetPrefixRangeEnd("/fence/")
	must(c.RoleAdd(ctx, "fence-rw"))
	must(c.RoleGrantPermission(ctx, "fence-rw", "/fence/", end, clientv3.PermissionType(clientv3.PermReadWrite)))
	must(c.RoleAdd(ctx, "fence-ro"))
	must(c.RoleGrantPermission(ctx, "fence-ro", "/fence/", end, clientv3.PermissionType(clientv3.PermRead)))
	for user, role := range map[string]string{"fence": "fence-rw", "nobody": "", "reader": "fence-ro"} {
		must(c.UserAdd(ctx, user, user+"pw"))
		if role != "" {
			must(c.UserGrantRole(ctx, user, role))
		}
	}
	return s
}

// TestEtcdScript runs testdata/etcd/*.txtar against real etcd servers:
// $ETCD (plaintext), $ETCD_TLS with $CA, $CERT, $KEY (TLS with client
// certificates), $ETCD_AUTH (authentication on; users fence, reader and
// nobody, password USERpw). FENCE_ENDPOINTS is $ETCD and FENCE_PREFIX is
// unique to each script.
func TestEtcdScript(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd servers")
	}
	s := startEtcd(t)
	p := st.Params(filepath.Join("..", "..", "testdata", "etcd"))
	local := p.Setup
	p.Setup = func(env *testscript.Env) error {
		if err := local(env); err != nil {
			return err
		}
		ca, cert, key := s.tls.TLS()
		env.Setenv("ETCD", s.plain.Endpoints()[0])
		env.Setenv("ETCD_TLS", s.tls.Endpoints()[0])
		env.Setenv("ETCD_AUTH", s.auth.Endpoints()[0])
		env.Setenv("CA", ca)
		env.Setenv("CERT", cert)
		env.Setenv("KEY", key)
		// etcd, not the local state directory of the local scripts: both
		// in the environment would be refused.
		env.Vars = slices.DeleteFunc(env.Vars, func(kv string) bool { return strings.HasPrefix(kv, "FENCE_STATE_DIR=") })
		env.Setenv("FENCE_ENDPOINTS", s.plain.Endpoints()[0])
		env.Setenv("FENCE_PREFIX", "/t/"+filepath.Base(env.WorkDir)+"/")
		return nil
	}
	testscript.Run(t, p)
}

// TestEtcdPermissionDeniedIsNotRetried: a user without permission gets one
// clear line at once, not a retry loop until the dial timeout.
func TestEtcdPermissionDeniedIsNotRetried(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd servers")
	}
	srv := etcdtest.Start(t, etcdtest.WithAuth("rootpw"))
	c := srv.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.UserAdd(ctx, "nobody", "nobodypw"); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"status", "x"}, {"acquire", "x", "-n"}, {"list"}} {
		start := time.Now()
		code, stderr := st.Run(t, append(st.Env(t.TempDir()), "FENCE_PASSWORD=nobodypw"),
			append([]string{"--endpoints", srv.Endpoints()[0], "--user", "nobody", "--dial-timeout", "60s"}, args...)...)
		elapsed := time.Since(start)
		if code != 125 || !st.OneErrorLine.MatchString(stderr) || !strings.Contains(stderr, "permission denied") {
			t.Errorf("%v: exit %d, stderr %q; want 125 and one line saying permission denied", args, code, stderr)
		}
		if elapsed > 30*time.Second { // hang guard: far below the 60s dial timeout
			t.Errorf("%v: took %v: retried until the dial timeout", args, elapsed)
		}
	}
}

// TestListWatchRedrawsOnEachChange on etcd.
func TestListWatchRedrawsOnEachChange(t *testing.T) {
	srv := etcdtest.Start(t)
	env := slices.DeleteFunc(st.Env(t.TempDir()), func(kv string) bool { return strings.HasPrefix(kv, "FENCE_STATE_DIR=") })
	st.ListWatch(t, append(env, "FENCE_ENDPOINTS="+srv.Endpoints()[0]))
}

// etcdEnv is an environment for fence on srv, under a prefix of its own.
func etcdEnv(t *testing.T, srv *etcdtest.Server) []string {
	env := slices.DeleteFunc(st.Env(t.TempDir()), func(kv string) bool { return strings.HasPrefix(kv, "FENCE_STATE_DIR=") })
	return append(env, "FENCE_ENDPOINTS="+srv.Endpoints()[0], "FENCE_PREFIX=/"+t.Name()+"/")
}

// TestRunSetNoDeadlock on etcd: `fence run a b` against `fence run b a`.
func TestRunSetNoDeadlock(t *testing.T) {
	took := st.SetNoDeadlock(t, etcdEnv(t, etcdtest.Start(t)), 100, 60*time.Second)
	t.Logf("2 x 100 runs of a set of 2 locks in opposite orders: %v", took)
}

// TestRunSetContenders on etcd: 20 contenders over random subsets of 5 locks.
func TestRunSetContenders(t *testing.T) {
	st.SetContenders(t, etcdEnv(t, etcdtest.Start(t)), 20, 3, 60*time.Second)
}

// TestRunSlots on etcd: 10 `fence run sem --slots 3` contenders.
func TestRunSlots(t *testing.T) {
	st.Slots(t, etcdEnv(t, etcdtest.Start(t)))
}
