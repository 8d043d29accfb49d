package e2e

import (
	"bytes"
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/fence-dev/fence/pkg/guard/sqlguard/pgtest"
)

// TestPostgresReplication runs fence against a real streaming standby
// (pgtest.StartStandby: pg_basebackup -R from the primary): fence
// --postgres STANDBY acquire is refused with 125 and one line naming the
// fix; on the primary with the standby attached, fence warns in one line
// that an asynchronous failover can lose the last tokens, once (a second
// run the same day on the host does not repeat it), also when
// synchronous_standby_names names the standby but synchronous_commit is
// off (pgtest's server default), and not at all with synchronous_commit on;
// fence exporter exports the asynchronous standby as
// fence_coordinator_known_bug.
func TestPostgresReplication(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts PostgreSQL and a standby")
	}
	pg := pgtest.Start(t)
	dbName := pg.CreateDatabase(t)
	sb := pg.StartStandby(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// acquire runs fence ... acquire LOCK with the coordinator at url and
	// the warnings' once-a-day record in cache.
	acquire := func(url, cache, lock string) (code int, stdout, stderr string) {
		t.Helper()
		cmd := exec.CommandContext(ctx, fenceBin, "--postgres", url, "acquire", lock, "--ttl", "1m")
		cmd.Env = cleanEnv(t, "XDG_CACHE_HOME="+cache)
		var o, e bytes.Buffer
		cmd.Stdout, cmd.Stderr = &o, &e
		_ = cmd.Run()
		return cmd.ProcessState.ExitCode(), o.String(), e.String()
	}
	const risk = "failover can lose the last tokens"
	warnings := func(stderr string) (n int) {
		for _, l := range strings.Split(stderr, "\n") {
			if strings.Contains(l, risk) {
				n++
			}
		}
		return n
	}

	code, out, errOut := acquire(sb.URL(dbName), t.TempDir(), "a")
	t.Logf("on the standby: exit %d, stderr %q", code, errOut)
	if line := strings.TrimSpace(errOut); code != 125 || out != "" || strings.Contains(line, "\n") ||
		!strings.Contains(line, "standby") || !strings.Contains(line, "point fence at the primary") {
		t.Errorf("fence --postgres STANDBY acquire: exit %d, stdout %q, stderr %q; want 125 and one line naming the fix", code, out, errOut)
	}

	cache := t.TempDir()
	code, _, errOut = acquire(pg.URL(dbName), cache, "b")
	t.Logf("on the primary, asynchronous: exit %d, stderr %q", code, errOut)
	if code != 0 || warnings(errOut) != 1 || strings.Count(strings.TrimSpace(errOut), "\n") != 0 {
		t.Errorf("fence acquire on a primary with an asynchronous standby: exit %d, stderr %q; want 0 and one line warning that a %s", code, errOut, risk)
	}
	if code, _, errOut = acquire(pg.URL(dbName), cache, "c"); code != 0 || warnings(errOut) != 0 {
		t.Errorf("fence acquire again the same day: exit %d, stderr %q; want 0 and no warning (once a day on a host)", code, errOut)
	}

	// The exporter says so too.
	url := startExporter(t, cleanEnv(t, "FENCE_POSTGRES="+pg.URL(dbName)))
	const bug = `fence_coordinator_known_bug{issue="async-replication",version="postgres"}`
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) { // asked at the first scrape
		_, body, _ := get(url + "/metrics")
		if v, ok := sample(body, bug); ok && v == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("fence exporter on a primary with an asynchronous standby: no %s 1 in /metrics:\n%s", bug, body)
		}
	}

	admin := pg.Open(t, "postgres")
	if _, err := admin.ExecContext(ctx, "ALTER SYSTEM SET synchronous_standby_names = '*'"); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.ExecContext(ctx, "SELECT pg_reload_conf()"); err != nil {
		t.Fatal(err)
	}
	for names := ""; names != "*"; time.Sleep(10 * time.Millisecond) { // the reload is asynchronous
		if err := admin.QueryRowContext(ctx, "SELECT current_setting('synchronous_standby_names')").Scan(&names); err != nil {
			t.Fatal(err)
		}
	}
	code, _, errOut = acquire(pg.URL(dbName), t.TempDir(), "d")
	t.Logf("synchronous_standby_names '*', synchronous_commit off: exit %d, stderr %q", code, errOut)
	if code != 0 || warnings(errOut) != 1 || !strings.Contains(errOut, "synchronous_commit is off") {
		t.Errorf("fence acquire with synchronous_commit off: exit %d, stderr %q; want 0 and the warning", code, errOut)
	}
	if _, err := admin.ExecContext(ctx, "ALTER DATABASE "+dbName+" SET synchronous_commit = on"); err != nil {
		t.Fatal(err)
	}
	code, _, errOut = acquire(pg.URL(dbName), t.TempDir(), "e")
	t.Logf("synchronous replication: exit %d, stderr %q", code, errOut)
	if code != 0 || errOut != "" {
		t.Errorf("fence acquire with synchronous replication to the standby: exit %d, stderr %q; want 0 and no warning", code, errOut)
	}
}
