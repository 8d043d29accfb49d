package e2e

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fence-dev/fence/pkg/guard/sqlguard/pgtest"
)

// startExporter starts `fence exporter` on a free loopback port with env
// and returns its base URL once /healthz answers.
func startExporter(t *testing.T, env []string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	p := startFence(t, env, "exporter", "--listen", addr)
	url := "http://" + addr
	for deadline := time.Now().Add(hangGuard); ; time.Sleep(20 * time.Millisecond) {
		if code, _, _ := get(url + "/healthz"); code != 0 {
			return url
		}
		if p.exited() || time.Now().After(deadline) {
			t.Fatalf("fence exporter does not answer on %s:\n%s", addr, p.stderr)
		}
	}
}

// get fetches url (within 10 s) and returns its status (0: no answer), body
// and how long it took.
func get(url string) (int, string, time.Duration) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err.Error(), time.Since(start)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), time.Since(start)
}

// sample is the value of the series of /metrics body whose name and labels
// are exactly series (`fence_lock_held{lock="a"}`); ok false when absent.
func sample(body, series string) (float64, bool) {
	for _, l := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(l, series+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return f, err == nil
		}
	}
	return 0, false
}

// TestPostgresExporter: `fence exporter` on PostgreSQL (FENCE_POSTGRES)
// exports a lock held by `fence run` (fence_lock_held, _token as fence
// status reads it, _holder_info, _waiters; the coordinator up) and
// answers /healthz "ok"; with the server stopped (SIGSTOP of the
// postmaster and its backends) /healthz answers 503 saying since when,
// within its 2 s bound (0.5 s of slack), and 200 again after the thaw.
func TestPostgresExporter(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts PostgreSQL")
	}
	pg := pgtest.Start(t)
	env := cleanEnv(t, "FENCE_POSTGRES="+pg.URL(pg.CreateDatabase(t)))
	holder := startFence(t, env, "run", "jobs/x", "--holder", "h1", "--ttl", "10s", "--", "sleep", "60")
	var st struct {
		Holder string
		Token  uint64
	}
	for deadline := time.Now().Add(hangGuard); st.Holder != "h1"; time.Sleep(20 * time.Millisecond) {
		out, _ := fence(t, env, "status", "jobs/x", "-o", "json")
		_ = json.Unmarshal([]byte(out), &st)
		if holder.exited() || time.Now().After(deadline) {
			t.Fatalf("fence run never held jobs/x (status %s):\n%s", out, holder.stderr)
		}
	}
	url := startExporter(t, env)
	want := map[string]float64{
		`fence_lock_held{lock="jobs/x"}`:                    1,
		`fence_lock_token{lock="jobs/x"}`:                   float64(st.Token),
		`fence_lock_holder_info{holder="h1",lock="jobs/x"}`: 1,
		`fence_lock_waiters{lock="jobs/x"}`:                 0,
		`fence_exporter_coordinator_up`:                     1,
	}
	var body string
	for deadline := time.Now().Add(hangGuard); ; time.Sleep(50 * time.Millisecond) {
		var code int
		code, body, _ = get(url + "/metrics")
		missing := []string{}
		for s, v := range want {
			if got, ok := sample(body, s); !ok || got != v {
				missing = append(missing, s+" "+strconv.FormatFloat(v, 'g', -1, 64))
			}
		}
		if code == http.StatusOK && len(missing) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/metrics (%d) lacks %v:\n%s", code, missing, body)
		}
	}
	if _, ok := sample(body, `fence_coordinator_known_bug{issue="async-replication",version="postgres"}`); ok {
		t.Errorf("fence_coordinator_known_bug on a server without standbys:\n%s", body)
	}
	if code, body, _ := get(url + "/healthz"); code != http.StatusOK || strings.TrimSpace(body) != "ok" {
		t.Fatalf("/healthz: %d %q, want 200 ok", code, body)
	}

	if err := signalServer(pg.PID(), syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	thawed := false
	t.Cleanup(func() {
		if !thawed {
			_ = signalServer(pg.PID(), syscall.SIGCONT)
		}
	})
	time.Sleep(time.Second) // the last answer is no longer fresh
	code, hbody, took := get(url + "/healthz")
	t.Logf("/healthz with the server stopped: %d %q in %v", code, strings.TrimSpace(hbody), took.Round(time.Millisecond))
	if code != http.StatusServiceUnavailable || !strings.Contains(hbody, "no answer for") {
		t.Errorf("/healthz with the server stopped: %d %q, want 503 saying since when", code, hbody)
	}
	if took > 2500*time.Millisecond {
		t.Errorf("/healthz took %v with the server stopped, want its 2s bound", took)
	}
	if err := signalServer(pg.PID(), syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	thawed = true
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		code, hbody, _ := get(url + "/healthz")
		if code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/healthz 10 s after the thaw: %d %q", code, hbody)
		}
	}
}
