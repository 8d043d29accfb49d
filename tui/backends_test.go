package tui

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/x/exp/teatest"
	"github.com/fence-dev/fence/internal/etcdproc"
	"github.com/fence-dev/fence/internal/etcdtest"
	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/coord/etcd"
	"github.com/fence-dev/fence/pkg/coord/local"
)

// These tests drive the dashboard through a real coordinator: real leases,
// real Watch events, real reads, on the real clock.

func openLocal(t *testing.T) coord.Coordinator {
	t.Helper()
	c, err := local.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func openEtcd(t *testing.T) coord.Coordinator {
	t.Helper()
	srv := etcdtest.Start(t)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	c, err := etcd.New(ctx, srv.Endpoints())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func acquire(t *testing.T, c coord.Coordinator, name, holder string, ttl time.Duration) *coord.Lease {
	t.Helper()
	l, err := c.Acquire(t.Context(), name, coord.AcquireOptions{TTL: ttl, Holder: holder})
	if err != nil {
		t.Fatalf("acquire %s: %v", name, err)
	}
	return l
}

func TestLocalBackend(t *testing.T) {
	dashboardScenario(t, openLocal(t), "local ", 0)
}

func TestEtcdBackend(t *testing.T) {
	// etcd's watch does not show renewals: the dashboard sees one when a
	// read finds the expiry moved on by more than a quarter of the TTL,
	// so the renewal comes a few seconds after the grant.
	dashboardScenario(t, openEtcd(t), "etcd 127.0.0.1:", 3*time.Second)
}

// dashboardScenario: holders come and go, renew, queue and are revoked from
// the keyboard; the dashboard follows each step.
func dashboardScenario(t *testing.T, c coord.Coordinator, backend string, renewAfter time.Duration) {
	// The first lease is short, so that a renewal after renewAfter moves
	// its expiry by more than a quarter of its TTL; the others outlive a
	// slow run.
	const short, ttl = 6 * time.Second, time.Minute
	ctx := t.Context()
	first := acquire(t, c, "deploy/prod", "ci:1", short)

	h := newHarness(t, c, Options{Now: time.Now, Refresh: 300 * time.Millisecond})
	h.settle()
	if !strings.HasPrefix(h.m.backend, backend) || !strings.Contains(h.screen()[22], backend) {
		t.Fatalf("backend %q; status bar %q", h.m.backend, h.screen()[22])
	}
	row := h.m.store.Get("deploy/prod")
	if row == nil || !row.Info.Held || row.Info.Holder != "ci:1" || row.Info.Token != first.Token {
		t.Fatalf("deploy/prod: %+v", row)
	}
	if f := fields(h.screen()[lineOf(h.screen(), "deploy/prod")]); f[1] != "held" || f[2] != "ci:1" {
		t.Fatalf("deploy/prod row %q", f)
	}

	// A second holder appears through the watch.
	second := acquire(t, c, "batch/x", "batch:2", ttl)
	h.until("batch/x on screen", func() bool {
		r := h.m.store.Get("batch/x")
		return r != nil && r.Info.Held && r.Info.Token == second.Token
	})

	// A renewal is counted.
	if renewAfter > 0 {
		time.Sleep(renewAfter)
	}
	if _, err := c.Renew(ctx, "deploy/prod", first.ID); err != nil {
		t.Fatal(err)
	}
	h.until("the renewal", func() bool { return h.m.store.Get("deploy/prod").Renewals >= 1 })

	// A waiter queues behind ci:1, then takes over when ci:1 releases.
	next := make(chan *coord.Lease, 1)
	waitCtx, stopWaiting := context.WithCancel(ctx)
	defer stopWaiting()
	go func() {
		l, err := c.Acquire(waitCtx, "deploy/prod", coord.AcquireOptions{TTL: ttl, Holder: "next:3", Wait: coord.WaitForever})
		if err != nil {
			l = nil
		}
		next <- l
	}()
	h.until("the waiter", func() bool { return h.m.store.Get("deploy/prod").Info.Waiters == 1 })
	if s := h.screen()[22]; !strings.Contains(s, "1 waiting") {
		t.Fatalf("status bar %q", s)
	}
	if err := c.Release(ctx, "deploy/prod", first.ID); err != nil {
		t.Fatal(err)
	}
	third := <-next
	if third == nil {
		t.Fatal("the waiter did not get the lock")
	}
	h.until("the waiter holding", func() bool {
		r := h.m.store.Get("deploy/prod")
		return r.Info.Held && r.Info.Holder == "next:3" && r.Info.Token == third.Token
	})
	if r := h.m.store.Get("deploy/prod"); r.Renewals != 0 || third.Token <= first.Token {
		t.Fatalf("new lease: renewals %d, token %d after %d", r.Renewals, third.Token, first.Token)
	}

	// Revoke batch/x from the keyboard (it sorts first by name).
	h.key("g", "r")
	if h.m.asking == nil || !strings.HasPrefix(h.m.asking.text, "Revoke the lease on batch/x ") {
		t.Fatalf("no question for batch/x: %q", h.screen()[23])
	}
	h.key("y")
	h.until("the revoke", func() bool { return !h.m.changing })
	if s := h.screen()[23]; !strings.Contains(s, "revoked batch/x") {
		t.Fatalf("message %q", s)
	}
	if info, err := c.Inspect(ctx, "batch/x"); err != nil || info.Held {
		t.Fatalf("batch/x after the revoke: %+v, %v", info, err)
	}
	if _, err := c.Renew(ctx, "batch/x", second.ID); !errors.Is(err, coord.ErrLeaseLost) {
		t.Fatalf("renewing the revoked lease: %v", err)
	}
	// Free on screen, or gone (etcd keeps nothing for a free lock).
	h.until("batch/x free", func() bool { r := h.m.store.Get("batch/x"); return r == nil || !r.Info.Held })

	if err := c.Release(ctx, "deploy/prod", third.ID); err != nil {
		t.Fatal(err)
	}
	h.until("deploy/prod free", func() bool { r := h.m.store.Get("deploy/prod"); return r == nil || !r.Info.Held })
	if h.m.readErr != nil || h.m.watchErr != nil {
		t.Fatalf("health: read %v, watch %v", h.m.readErr, h.m.watchErr)
	}
}

// TestLocalBackendProgram runs the whole Bubble Tea program (teatest)
// against a local coordinator: the lock shows up on the screen, and r then
// y revoke it for real.
func TestLocalBackendProgram(t *testing.T) {
	c := openLocal(t)
	l := acquire(t, c, "jobs/nightly", "cron:7", time.Minute)
	m := New(t.Context(), c, Options{})
	tm := teatest.NewTestModel(t, m, teatest.WithInitialTermSize(100, 30))
	wait := func(what string) {
		t.Helper()
		teatest.WaitFor(t, tm.Output(), func(b []byte) bool { return bytes.Contains(b, []byte(what)) },
			teatest.WithDuration(20*time.Second), teatest.WithCheckInterval(10*time.Millisecond))
	}
	wait("cron:7")
	tm.Send(keyMsg("r"))
	wait("[y/N]")
	tm.Send(keyMsg("y"))
	wait("revoked jobs/nightly")
	if info, err := c.Inspect(t.Context(), "jobs/nightly"); err != nil || info.Held {
		t.Fatalf("after the revoke: %+v, %v", info, err)
	}
	tm.Send(tea.KeyMsg{Type: tea.KeyCtrlC})
	tm.WaitFinished(t, teatest.WithFinalTimeout(20*time.Second))
	_ = l
}

func TestLocalLimits(t *testing.T) { limitsScenario(t, openLocal(t)) }
func TestEtcdLimits(t *testing.T)  { limitsScenario(t, openEtcd(t)) }

// limitsScenario, on a real coordinator with no periodic list (Refresh of
// an hour): f freezes the selected lock, a prefix frozen through the API
// shows on its lock, a waiter held back is named in the details, t thaws
// and the waiter holds. Every change shows from the watch alone: no list
// is read after the first.
func limitsScenario(t *testing.T, c coord.Coordinator) {
	lim := c
	ctx := t.Context()
	l := acquire(t, c, "jobs/a", "a:1", time.Minute)
	acquire(t, c, "reports/daily", "r:2", time.Minute)
	h := newHarness(t, c, Options{Now: time.Now, Refresh: time.Hour, Operator: "ops@console"})
	h.settle()
	listed := h.m.lastList
	state := func(name string) string {
		if r := h.m.store.Get(name); r != nil {
			return r.Label(r.State(time.Now()))
		}
		return "not listed"
	}

	h.key("g", "f", "y") // jobs/a
	h.until("jobs/a frozen", func() bool { return !h.m.changing && state("jobs/a") == "frozen" })
	if err := lim.SetLimit(ctx, coord.Limit{Name: "reports/", Prefix: true, Max: 1, By: "cli@ops"}); err != nil {
		t.Fatal(err)
	}
	h.until("reports/daily limited by its prefix", func() bool { return state("reports/daily") == "limit 1" })

	// The holder goes; a waiter queues, held back by the freeze.
	if err := c.Release(ctx, "jobs/a", l.ID); err != nil {
		t.Fatal(err)
	}
	got := make(chan *coord.Lease, 1)
	go func() {
		l, err := c.Acquire(ctx, "jobs/a", coord.AcquireOptions{TTL: time.Minute, Holder: "next:3", Wait: coord.WaitForever})
		if err != nil {
			l = nil
		}
		got <- l
	}()
	h.until("the waiter held back", func() bool {
		r := h.m.store.Get("jobs/a")
		return r != nil && !r.Info.Held && len(r.Info.Queue) == 1 && r.Info.Queue[0].Holder == "next:3" && state("jobs/a") == "frozen"
	})
	h.key("enter")
	h.until("the details naming the waiter", func() bool {
		v := h.m.View()
		return strings.Contains(v, "queue     1. next:3, waiting") && strings.Contains(v, "limit     frozen (this lock) by ops@console")
	})
	h.key("t", "y")
	h.until("the thaw", func() bool { return !h.m.changing })
	third := <-got
	if third == nil || third.Token <= l.Token {
		t.Fatalf("the waiter after the thaw: %+v (first token %d)", third, l.Token)
	}
	h.until("next:3 holding jobs/a", func() bool {
		r := h.m.store.Get("jobs/a")
		return r != nil && r.Info.Held && r.Info.Holder == "next:3" && state("jobs/a") == "held" && len(r.Info.Queue) == 0
	})
	if _, ok, err := lim.ClearLimit(ctx, "reports/", true); err != nil || !ok {
		t.Fatalf("ClearLimit: %v, %v", ok, err)
	}
	h.until("reports/daily thawed", func() bool { return state("reports/daily") == "held" })
	if h.m.lastList != listed {
		t.Errorf("the dashboard listed again (at %v, first at %v): the changes must show from the watch", h.m.lastList, listed)
	}
}

// TestEtcdStallShows: Debian's etcd stopped with SIGSTOP between two lists
// (the default 5s refresh) shows as not answering on the status line
// within two seconds (2.0s measured: the probe of the next tick, a second
// later, unanswered for a second; 0.5s slack for a loaded machine), on the
// real clock.
func TestEtcdStallShows(t *testing.T) {
	srv := etcdproc.Start(t)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	c, err := etcd.New(ctx, srv.Endpoints())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	h := newHarness(t, c, Options{Now: time.Now})
	h.settle()
	h.until("a probe answered", func() bool { return h.m.lastOK.After(h.m.lastList) })
	if err := srv.Freeze(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Thaw() })
	stalled := time.Now()
	h.until("the stall on the status line", func() bool { return strings.Contains(h.screen()[22], "no answer for") })
	took := time.Since(stalled)
	t.Logf("status line %.1fs into the stall: %q", took.Seconds(), strings.TrimSpace(h.screen()[22]))
	if took > 2500*time.Millisecond {
		t.Errorf("the stall showed %v after it began, want within 2s", took)
	}
}
