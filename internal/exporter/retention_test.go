package exporter_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fence-dev/fence/internal/etcdbugs"
	"github.com/fence-dev/fence/internal/etcdproc"
	"github.com/fence-dev/fence/internal/exporter"
	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/coord/etcd"
)

// TestRetention: on etcd, a lock gone (released, so no longer listed) for
// longer than Options.Retention is no longer exported, its histograms and
// history counters included; used again, it comes back, counting its
// history from where it was. A held lock stays, and on the local backend
// a free lock is still listed and stays.
func TestRetention(t *testing.T) {
	const retention = 500 * time.Millisecond
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			ctx := ctxT(t)
			drv := recorder(t, b.open(t))
			if _, err := drv.Acquire(ctx, "kept", coord.AcquireOptions{TTL: time.Minute}); err != nil {
				t.Fatal(err)
			}
			url := serve(t, recorder(t, b.open(t)), exporter.Options{Retention: retention})
			l, err := drv.Acquire(ctx, "once", coord.AcquireOptions{TTL: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			if err := drv.Release(ctx, "once", l.ID); err != nil {
				t.Fatal(err)
			}
			fams := scrape(t, url)
			if v := value(t, fams, "fence_lock_events_total", "lock", "once", "kind", "acquired"); v != 1 {
				t.Fatalf("once: acquired events %v", v)
			}
			time.Sleep(retention + 100*time.Millisecond)
			scrape(t, url) // the List that finds it gone past the retention
			fams = scrape(t, url)
			_, exported := metric(fams, "fence_lock_held", map[string]string{"lock": "once"})
			if want := b.name == "local"; exported != want {
				t.Fatalf("%s: once exported %v past the retention, want %v", b.name, exported, want)
			}
			if b.name == "etcd" {
				for _, name := range []string{"fence_lock_events_total", "fence_lock_critical_section_seconds", "fence_lock_wait_seconds", "fence_lock_token"} {
					if _, ok := metric(fams, name, map[string]string{"lock": "once"}); ok {
						t.Errorf("%s{lock=once} still exported past the retention", name)
					}
				}
			}
			if v := value(t, fams, "fence_lock_held", "lock", "kept"); v != 1 {
				t.Errorf("kept: held %v", v)
			}
			// Used again: back, its events counted from where they were.
			if _, err := drv.Acquire(ctx, "once", coord.AcquireOptions{TTL: time.Minute}); err != nil {
				t.Fatal(err)
			}
			fams = scrape(t, url)
			if v := value(t, fams, "fence_lock_held", "lock", "once"); v != 1 {
				t.Errorf("once: held %v once acquired again", v)
			}
			want := 1.0 // the new acquisition only
			if b.name == "local" {
				want = 2
			}
			if v := value(t, fams, "fence_lock_events_total", "lock", "once", "kind", "acquired"); v != want {
				t.Errorf("once: acquired events %v once acquired again, want %v", v, want)
			}
		})
	}
}

// TestHealthzAndKnownBug: against Debian's etcd, /healthz answers 200
// while it answers, 503 within 2s of a read once it is stopped (SIGSTOP),
// saying since when, and 200 again once it answers; and the server's
// version with a known lease-safety bug (3.4.23: etcd#15247) is exported
// as fence_coordinator_known_bug.
func TestHealthzAndKnownBug(t *testing.T) {
	srv := etcdproc.Start(t)
	c, err := etcd.New(context.Background(), srv.Endpoints(), etcd.WithPrefix("/hz/"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	url := serve(t, c, exporter.Options{})
	health := func() (int, string, time.Duration) {
		t.Helper()
		start := time.Now()
		resp, err := http.Get(url + "/healthz")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), time.Since(start)
	}
	if code, body, _ := health(); code != http.StatusOK {
		t.Fatalf("/healthz: %d %s", code, body)
	}
	fams := scrape(t, url)
	vs := c.(interface {
		ServerVersions(context.Context) []etcd.MemberVersion
	}).ServerVersions(ctxT(t))
	if len(vs) != 1 || vs[0].Err != nil {
		t.Fatalf("ServerVersions: %+v", vs)
	}
	bugs := etcdbugs.BugsOf(vs[0].Version)
	if len(bugs) == 0 {
		t.Skipf("Debian's etcd %s has no known lease-safety bug", vs[0].Version)
	}
	if v := value(t, fams, "fence_coordinator_known_bug", "version", vs[0].Version, "issue", bugs[0].Issue); v != 1 {
		t.Errorf("fence_coordinator_known_bug{version=%s,issue=%s} = %v", vs[0].Version, bugs[0].Issue, v)
	}

	if err := srv.Freeze(); err != nil {
		t.Fatal(err)
	}
	thawed := false
	t.Cleanup(func() {
		if !thawed {
			srv.Thaw()
		}
	})
	time.Sleep(time.Second) // the last answer is no longer fresh
	code, body, took := health()
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "no answer for") {
		t.Errorf("/healthz with etcd stopped: %d %q, want 503 saying since when", code, body)
	}
	if took > 2500*time.Millisecond {
		t.Errorf("/healthz took %v with etcd stopped, want its 2s bound", took)
	}
	t.Logf("stopped: %d %s (in %v)", code, strings.TrimSpace(body), took.Round(time.Millisecond))
	if err := srv.Thaw(); err != nil {
		t.Fatal(err)
	}
	thawed = true
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, body, _ := health()
		if code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/healthz after the thaw: %d %s", code, body)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
