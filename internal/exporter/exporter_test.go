package exporter_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/fence-dev/fence/internal/etcdtest"
	"github.com/fence-dev/fence/internal/exporter"
	"github.com/fence-dev/fence/internal/history/auto"
	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/coord/etcd"
	"github.com/fence-dev/fence/pkg/coord/local"
	"github.com/fence-dev/fence/pkg/coord/postgres"
	"github.com/fence-dev/fence/pkg/guard/sqlguard/pgtest"
	"github.com/fence-dev/fence/pkg/history"
)

var quiet = slog.New(slog.DiscardHandler)

// backend opens coordinators on one storage; each call is a new client.
type backend struct {
	name     string
	open     func(t *testing.T) coord.Coordinator // plain
	shortTTL time.Duration
}

var prefixes atomic.Int64

func backends(t *testing.T) []backend {
	dir := filepath.Join(t.TempDir(), "state")
	srv := etcdtest.Start(t)
	prefix := fmt.Sprintf("/x%d/", prefixes.Add(1))
	return []backend{
		{name: "local", shortTTL: 300 * time.Millisecond, open: func(t *testing.T) coord.Coordinator {
			c, err := local.Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			return c
		}},
		{name: "etcd", shortTTL: time.Second, open: func(t *testing.T) coord.Coordinator {
			c, err := etcd.New(context.Background(), srv.Endpoints(), etcd.WithPrefix(prefix))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			return c
		}},
	}
}

func recorder(t *testing.T, c coord.Coordinator) history.Recorder {
	t.Helper()
	r, err := auto.Wrap(c, history.WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// serve starts the exporter on a loopback port for the test's duration and
// returns its base URL.
func serve(t *testing.T, c coord.Coordinator, opts exporter.Options) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	opts.Logger = quiet
	ready := make(chan net.Addr, 1)
	opts.OnListen = func(a net.Addr) { ready <- a }
	go func() { done <- exporter.Serve(ctx, "127.0.0.1:0", c, opts) }()
	var addr net.Addr
	select {
	case addr = <-ready:
	case err := <-done:
		t.Fatalf("Serve: %v", err)
	}
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve returned %v after the context ended", err)
		}
	})
	return "http://" + addr.String()
}

// scrape fetches /metrics with a real HTTP client and parses it with the
// Prometheus text parser.
func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctxT(t), http.MethodGet, url+"/metrics", nil)
	req.Header.Set("Accept", "text/plain")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET /metrics: %s %s\n%s", resp.Status, resp.Header.Get("Content-Type"), b)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parsing /metrics: %v", err)
	}
	return fams
}

// metric finds the sample of name whose labels include want.
func metric(fams map[string]*dto.MetricFamily, name string, want map[string]string) (*dto.Metric, bool) {
	f := fams[name]
	if f == nil {
		return nil, false
	}
next:
	for _, m := range f.Metric {
		have := map[string]string{}
		for _, l := range m.Label {
			have[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if have[k] != v {
				continue next
			}
		}
		return m, true
	}
	return nil, false
}

// value returns the value of a gauge or counter sample, failing the test
// when it is missing.
func value(t *testing.T, fams map[string]*dto.MetricFamily, name string, labels ...string) float64 {
	t.Helper()
	want := map[string]string{}
	for i := 0; i+1 < len(labels); i += 2 {
		want[labels[i]] = labels[i+1]
	}
	m, ok := metric(fams, name, want)
	if !ok {
		t.Fatalf("no %s%v in the scrape", name, want)
	}
	switch {
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Counter != nil:
		return m.Counter.GetValue()
	}
	t.Fatalf("%s%v is neither a gauge nor a counter", name, want)
	return 0
}

func histogram(t *testing.T, fams map[string]*dto.MetricFamily, lock string) (count uint64, sum float64) {
	t.Helper()
	m, ok := metric(fams, "fence_lock_critical_section_seconds", map[string]string{"lock": lock})
	if !ok {
		return 0, 0
	}
	if fams["fence_lock_critical_section_seconds"].GetType() != dto.MetricType_HISTOGRAM {
		t.Fatal("fence_lock_critical_section_seconds is not a histogram")
	}
	return m.Histogram.GetSampleCount(), m.Histogram.GetSampleSum()
}

func TestExporter(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) { testExporter(t, b) })
	}
}

func testExporter(t *testing.T, b backend) {
	ctx := ctxT(t)
	drv := recorder(t, b.open(t))
	// A lock held before the exporter starts is in the first scrape.
	early, err := drv.Acquire(ctx, "early", coord.AcquireOptions{TTL: 30 * time.Second, Holder: "early-bird"})
	if err != nil {
		t.Fatal(err)
	}
	url := serve(t, recorder(t, b.open(t)), exporter.Options{})

	fams := scrape(t, url)
	if v := value(t, fams, "fence_lock_held", "lock", "early"); v != 1 {
		t.Errorf("early: held %v", v)
	}
	if v := value(t, fams, "fence_lock_holder_info", "lock", "early", "holder", "early-bird"); v != 1 {
		t.Errorf("early: holder info %v", v)
	}
	if v := value(t, fams, "fence_exporter_coordinator_up"); v != 1 {
		t.Errorf("coordinator_up %v", v)
	}
	if v := value(t, fams, "fence_exporter_history_up"); v != 1 {
		t.Errorf("history_up %v", v)
	}

	// Acquire.
	a, err := drv.Acquire(ctx, "jobs/a", coord.AcquireOptions{TTL: 30 * time.Second, Holder: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	fams = scrape(t, url)
	if v := value(t, fams, "fence_lock_held", "lock", "jobs/a"); v != 1 {
		t.Errorf("held %v after Acquire", v)
	}
	if v := value(t, fams, "fence_lock_token", "lock", "jobs/a"); v != float64(a.Token) {
		t.Errorf("token %v, want %d", v, a.Token)
	}
	if v := value(t, fams, "fence_lock_ttl_remaining_seconds", "lock", "jobs/a"); v <= 0 || v > a.TTL.Seconds() {
		t.Errorf("ttl remaining %v, want in (0, %v]", v, a.TTL.Seconds())
	}
	if v := value(t, fams, "fence_lock_holder_info", "lock", "jobs/a", "holder", "alice"); v != 1 {
		t.Errorf("holder info %v", v)
	}
	if v := value(t, fams, "fence_lock_held_seconds", "lock", "jobs/a"); v < 0 || v > 60 {
		t.Errorf("held seconds %v", v)
	}
	if v := value(t, fams, "fence_lock_held_seconds", "lock", "early"); v <= 0 {
		t.Errorf("early: held seconds %v, want > 0", v)
	}
	if v := value(t, fams, "fence_lock_events_total", "lock", "jobs/a", "kind", "acquired"); v != 1 {
		t.Errorf("acquired events %v", v)
	}
	if v := value(t, fams, "fence_lock_renewal_failures_total", "lock", "jobs/a"); v != 0 {
		t.Errorf("renewal failures %v before any", v)
	}
	if v := value(t, fams, "fence_lock_events_total", "lock", "jobs/a", "kind", "lease_lost"); v != 0 {
		t.Errorf("lease_lost events %v before any", v)
	}

	// Renewal failures (one event standing for 3), stale refusals and --once
	// runs, as fence run and the guards record them; then a renewal.
	completedAt := time.Now().Add(-time.Minute).Truncate(time.Second)
	for _, e := range []history.Event{
		{Lock: "jobs/a", Kind: history.RenewalFailed, Holder: "alice", Token: a.Token, Count: 3, Error: "timeout"},
		{Lock: "jobs/a", Kind: history.StaleRefused, Key: "k", Token: a.Token - 1, AcceptedToken: a.Token},
		{Lock: "jobs/a", Kind: history.StaleRefused, Key: "k", Token: a.Token - 1, AcceptedToken: a.Token},
		{Time: completedAt, Lock: "jobs/a", Kind: history.Completed, Key: "2026-05-06T00:00:00Z", Holder: "alice", Token: a.Token},
		{Lock: "jobs/a", Kind: history.Skipped, Key: "2026-05-06T00:00:00Z", Holder: "bob", AcceptedToken: a.Token},
		{Lock: "jobs/a", Kind: history.Skipped, Key: "2026-05-06T00:00:00Z", Holder: "carol", AcceptedToken: a.Token},
	} {
		if err := drv.Record(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := drv.Renew(ctx, "jobs/a", a.ID); err != nil {
		t.Fatal(err)
	}
	fams = scrape(t, url)
	if v := value(t, fams, "fence_lock_renewal_failures_total", "lock", "jobs/a"); v != 3 {
		t.Errorf("renewal failures %v, want 3", v)
	}
	if v := value(t, fams, "fence_lock_stale_refusals_total", "lock", "jobs/a"); v != 2 {
		t.Errorf("stale refusals %v, want 2", v)
	}
	// --once runs: completed and skipped counted, the last completion's time.
	if v := value(t, fams, "fence_lock_events_total", "lock", "jobs/a", "kind", "completed"); v != 1 {
		t.Errorf("completed events %v, want 1", v)
	}
	if v := value(t, fams, "fence_lock_events_total", "lock", "jobs/a", "kind", "skipped"); v != 2 {
		t.Errorf("skipped events %v, want 2", v)
	}
	if v := value(t, fams, "fence_lock_last_completion_timestamp_seconds", "lock", "jobs/a"); v != float64(completedAt.Unix()) {
		t.Errorf("last completion %v, want %d", v, completedAt.Unix())
	}
	if v := value(t, fams, "fence_lock_held", "lock", "jobs/a"); v != 1 {
		t.Errorf("held %v after Renew", v)
	}

	// Release: the critical section is observed.
	time.Sleep(50 * time.Millisecond)
	if err := drv.Release(ctx, "jobs/a", a.ID); err != nil {
		t.Fatal(err)
	}
	fams = scrape(t, url)
	if v := value(t, fams, "fence_lock_held", "lock", "jobs/a"); v != 0 {
		t.Errorf("held %v after Release", v)
	}
	if _, ok := metric(fams, "fence_lock_holder_info", map[string]string{"lock": "jobs/a"}); ok {
		t.Error("holder info still there after Release")
	}
	if v := value(t, fams, "fence_lock_ttl_remaining_seconds", "lock", "jobs/a"); v != 0 {
		t.Errorf("ttl remaining %v after Release", v)
	}
	if v := value(t, fams, "fence_lock_held_seconds", "lock", "jobs/a"); v != 0 {
		t.Errorf("held seconds %v after Release", v)
	}
	if v := value(t, fams, "fence_lock_token", "lock", "jobs/a"); v != float64(a.Token) {
		t.Errorf("token %v after Release, want the last one %d", v, a.Token)
	}
	if n, sum := histogram(t, fams, "jobs/a"); n != 1 || sum < 0.05 || sum > 60 {
		t.Errorf("critical section: %d observations, sum %v; want 1 of at least 0.05s", n, sum)
	}
	if v := value(t, fams, "fence_lock_events_total", "lock", "jobs/a", "kind", "released"); v != 1 {
		t.Errorf("released events %v", v)
	}

	// Expiry: a lease that is never renewed ends at its TTL.
	x, err := drv.Acquire(ctx, "jobs/x", coord.AcquireOptions{TTL: b.shortTTL, Holder: "xavier"})
	if err != nil {
		t.Fatal(err)
	}
	if v := value(t, scrape(t, url), "fence_lock_held", "lock", "jobs/x"); v != 1 {
		t.Errorf("jobs/x held %v", v)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		fams = scrape(t, url)
		if value(t, fams, "fence_lock_held", "lock", "jobs/x") == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("jobs/x still held long after its TTL")
		}
	}
	if n, _ := histogram(t, fams, "jobs/x"); n != 1 {
		t.Errorf("jobs/x: %d critical sections observed, want 1", n)
	}
	if v := value(t, fams, "fence_lock_token", "lock", "jobs/x"); v != float64(x.Token) {
		t.Errorf("jobs/x token %v", v)
	}
	_ = drv.Release(ctx, "early", early.ID)
}

// TestWatchSeesEverySection: sections that begin and end between two
// scrapes are counted, from the watch (etcd reports every change).
func TestWatchSeesEverySection(t *testing.T) {
	b := backends(t)[1]
	url := serve(t, b.open(t), exporter.Options{})
	drv := b.open(t)
	scrape(t, url) // the exporter runs
	const cycles = 3
	for i := 0; i < cycles; i++ {
		l, err := drv.Acquire(ctxT(t), "w", coord.AcquireOptions{TTL: 30 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if err := drv.Release(ctxT(t), "w", l.ID); err != nil {
			t.Fatal(err)
		}
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		fams := scrape(t, url)
		n, _ := histogram(t, fams, "w")
		if n == cycles {
			break
		}
		if n > cycles || time.Now().After(deadline) {
			t.Fatalf("%d critical sections observed, want %d", n, cycles)
		}
	}
}

// hookedList is a coordinator whose next List runs before (if set) before
// it reads the locks and after (if set) once it read them, before it
// answers: each once.
type hookedList struct {
	coord.Coordinator
	mu            sync.Mutex
	before, after func()
}

func (c *hookedList) List(ctx context.Context, prefix string) ([]coord.LockInfo, error) {
	take := func(f *func()) {
		c.mu.Lock()
		g := *f
		*f = nil
		c.mu.Unlock()
		if g != nil {
			g()
		}
	}
	take(&c.before)
	infos, err := c.Coordinator.List(ctx, prefix)
	take(&c.after)
	return infos, err
}

// TestWatchBeforeFirstList: the exporter starts its watch before its first
// List, so a section that begins and ends while that List runs (etcd: its
// lock is then free, so no List shows it) is counted by the watch.
func TestWatchBeforeFirstList(t *testing.T) {
	b := backends(t)[1]
	drv := b.open(t)
	c := &hookedList{Coordinator: b.open(t), before: func() {
		l, err := drv.Acquire(ctxT(t), "between", coord.AcquireOptions{TTL: 30 * time.Second})
		if err == nil {
			err = drv.Release(ctxT(t), "between", l.ID)
		}
		if err != nil {
			t.Error(err)
		}
	}}
	url := serve(t, c, exporter.Options{})
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		n, _ := histogram(t, scrape(t, url), "between")
		if n == 1 {
			break
		}
		if n > 1 || time.Now().After(deadline) {
			t.Fatalf("%d critical sections observed of a hold during the first List, want 1", n)
		}
	}
}

// TestListOlderThanWatch: a scrape's List that read the locks before an
// acquisition the watch then reported does not end that holder: the lock
// stays held (in that scrape and the next), no section is observed until
// its release, and then one.
func TestListOlderThanWatch(t *testing.T) {
	b := backends(t)[1]
	drv := b.open(t)
	c := &hookedList{Coordinator: b.open(t)}
	url := serve(t, c, exporter.Options{})
	var l *coord.Lease
	c.mu.Lock()
	c.after = func() {
		var err error
		if l, err = drv.Acquire(ctxT(t), "late", coord.AcquireOptions{TTL: 30 * time.Second}); err != nil {
			t.Error(err)
		}
		time.Sleep(time.Second) // the watch reports it
	}
	c.mu.Unlock()
	for i := range 2 {
		fams := scrape(t, url)
		if v := value(t, fams, "fence_lock_held", "lock", "late"); v != 1 {
			t.Errorf("scrape %d: held %v while held", i, v)
		}
		if n, _ := histogram(t, fams, "late"); n != 0 {
			t.Errorf("scrape %d: %d sections observed while held", i, n)
		}
	}
	if t.Failed() {
		return
	}
	if err := drv.Release(ctxT(t), "late", l.ID); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		n, _ := histogram(t, scrape(t, url), "late")
		if n == 1 {
			break
		}
		if n > 1 || time.Now().After(deadline) {
			t.Fatalf("%d sections observed after the release, want 1", n)
		}
	}
}

// TestWatchSeesEverySemaphoreSection: each holder of a semaphore that
// leaves is a critical section of its own, also while other holders stay.
func TestWatchSeesEverySemaphoreSection(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			url := serve(t, b.open(t), exporter.Options{})
			drv := b.open(t)
			scrape(t, url) // the exporter runs
			var ls []*coord.Lease
			for range 3 {
				l, err := drv.Acquire(ctxT(t), "sem", coord.AcquireOptions{TTL: 30 * time.Second, Slots: 3})
				if err != nil {
					t.Fatal(err)
				}
				ls = append(ls, l)
			}
			// sections waits until the watch has seen the holders, then
			// wants want sections observed.
			sections := func(holders int, want uint64) {
				t.Helper()
				for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
					fams := scrape(t, url)
					n, _ := histogram(t, fams, "sem")
					if n == want && value(t, fams, "fence_lock_holders", "lock", "sem") == float64(holders) {
						return
					}
					if n > want || time.Now().After(deadline) {
						t.Fatalf("%d holders of a semaphore: %d critical sections observed, want %d", holders, n, want)
					}
				}
			}
			sections(3, 0) // new holders end no section
			for i, l := range ls {
				if err := drv.Release(ctxT(t), "sem", l.ID); err != nil {
					t.Fatal(err)
				}
				sections(len(ls)-1-i, uint64(i+1))
			}
		})
	}
}

// TestNoHistory: a coordinator without history exports no history metrics.
func TestNoHistory(t *testing.T) {
	b := backends(t)[0]
	c := b.open(t)
	l, err := c.Acquire(ctxT(t), "plain", coord.AcquireOptions{TTL: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Release(ctxT(t), "plain", l.ID)
	fams := scrape(t, serve(t, c, exporter.Options{}))
	if v := value(t, fams, "fence_lock_held", "lock", "plain"); v != 1 {
		t.Errorf("held %v", v)
	}
	for _, name := range []string{"fence_lock_renewal_failures_total", "fence_lock_stale_refusals_total", "fence_exporter_history_up"} {
		if _, ok := fams[name]; ok {
			t.Errorf("%s exported without a history", name)
		}
	}
	if _, ok := fams["go_goroutines"]; !ok {
		t.Error("no Go collector metrics")
	}
}

func TestPrefix(t *testing.T) {
	b := backends(t)[0]
	drv := b.open(t)
	for _, n := range []string{"team-a/x", "team-b/y"} {
		if _, err := drv.Acquire(ctxT(t), n, coord.AcquireOptions{TTL: 30 * time.Second}); err != nil {
			t.Fatal(err)
		}
	}
	fams := scrape(t, serve(t, recorder(t, b.open(t)), exporter.Options{Prefix: "team-a/"}))
	if v := value(t, fams, "fence_lock_held", "lock", "team-a/x"); v != 1 {
		t.Errorf("team-a/x held %v", v)
	}
	if _, ok := metric(fams, "fence_lock_held", map[string]string{"lock": "team-b/y"}); ok {
		t.Error("team-b/y exported under prefix team-a/")
	}
}

func TestServeErrors(t *testing.T) {
	b := backends(t)[0]
	if err := exporter.Serve(ctxT(t), "127.0.0.1:notaport", b.open(t), exporter.Options{Logger: quiet}); err == nil {
		t.Error("Serve on a bad address succeeded")
	}
	c := b.open(t)
	c.Close()
	if _, err := exporter.Handler(ctxT(t), c, exporter.Options{Logger: quiet}); err == nil {
		t.Error("Handler on a closed coordinator succeeded")
	}
	// Serve on a free port stops when its context ends.
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	var addr atomic.Value
	go func() {
		done <- exporter.Serve(ctx, "127.0.0.1:0", b.open(t), exporter.Options{Logger: quiet,
			OnListen: func(a net.Addr) { addr.Store(a.String()); cancel() }})
	}()
	select {
	case err := <-done:
		if err != nil || addr.Load() == nil {
			t.Fatalf("Serve = %v (listened on %v)", err, addr.Load())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Serve did not return after its context ended")
	}
	// The landing page.
	url := serve(t, b.open(t), exporter.Options{})
	resp, err := http.Get(url + "/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), "/metrics") {
		t.Errorf("GET / = %s %q", resp.Status, body)
	}
	if resp, err := http.Get(url + "/nothing"); err != nil || resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET /nothing = %v, %v", resp.Status, err)
	} else {
		resp.Body.Close()
	}
}

// TestWaitsAndLimits: fence_lock_wait_seconds holds exactly the waits the
// history recorded for 20 queued acquisitions (count, sum and buckets), and
// fence_lock_frozen / fence_lock_limit show the operator limits, on both
// backends.
func TestWaitsAndLimits(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			ctx := ctxT(t)
			const queued = 20
			drv := recorder(t, b.open(t))
			first, err := drv.Acquire(ctx, "q", coord.AcquireOptions{TTL: 30 * time.Second, Holder: "first"})
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan error, queued)
			for i := 0; i < queued; i++ {
				c := recorder(t, b.open(t))
				in := make(chan struct{})
				go func() {
					l, err := c.Acquire(ctx, "q", coord.AcquireOptions{TTL: 30 * time.Second, Holder: fmt.Sprintf("w%d", i),
						Wait: coord.WaitForever, OnWait: func(coord.LockInfo) { close(in) }})
					if err == nil {
						time.Sleep(time.Duration(i%4) * 5 * time.Millisecond)
						err = c.Release(ctx, "q", l.ID)
					}
					done <- err
				}()
				<-in
			}
			time.Sleep(50 * time.Millisecond)
			if err := drv.Release(ctx, "q", first.ID); err != nil {
				t.Fatal(err)
			}
			for i := 0; i < queued; i++ {
				if err := <-done; err != nil {
					t.Fatal(err)
				}
			}
			lim := coord.Coordinator(drv)
			if err := lim.SetLimit(ctx, coord.Limit{Name: "q", Max: 0, Reason: "test"}); err != nil {
				t.Fatal(err)
			}
			if err := lim.SetLimit(ctx, coord.Limit{Name: "p/", Prefix: true, Max: 2}); err != nil {
				t.Fatal(err)
			}
			l, err := drv.Acquire(ctx, "p/one", coord.AcquireOptions{TTL: 30 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			evs, err := drv.History(ctx, "q", 0)
			if err != nil {
				t.Fatal(err)
			}
			fams := scrape(t, serve(t, recorder(t, b.open(t)), exporter.Options{}))
			// What the history says.
			var waits []float64
			for _, e := range evs {
				if e.Kind == history.Acquired {
					waits = append(waits, e.Wait.Seconds())
				}
			}
			if len(waits) != queued+1 {
				t.Fatalf("history of q has %d acquired events, want %d", len(waits), queued+1)
			}
			m, ok := metric(fams, "fence_lock_wait_seconds", map[string]string{"lock": "q"})
			if !ok || m.Histogram == nil {
				t.Fatal("no fence_lock_wait_seconds histogram for q")
			}
			h := m.Histogram
			var sum, longest float64
			for _, w := range waits {
				sum += w
				longest = max(longest, w)
			}
			if h.GetSampleCount() != uint64(len(waits)) || math.Abs(h.GetSampleSum()-sum) > 1e-9 {
				t.Errorf("fence_lock_wait_seconds{q}: count %d sum %.9f; the history: %d waits summing to %.9f",
					h.GetSampleCount(), h.GetSampleSum(), len(waits), sum)
			}
			for _, bk := range h.Bucket {
				want := 0
				for _, w := range waits {
					if w <= bk.GetUpperBound() {
						want++
					}
				}
				if bk.GetCumulativeCount() != uint64(want) {
					t.Errorf("fence_lock_wait_seconds{q} bucket le=%g: %d, want %d", bk.GetUpperBound(), bk.GetCumulativeCount(), want)
				}
			}
			t.Logf("%d waits recorded, sum %.3fs, longest %.3fs; the histogram: count %d, sum %.3fs",
				len(waits), sum, longest, h.GetSampleCount(), h.GetSampleSum())
			if v := value(t, fams, "fence_lock_frozen", "lock", "q"); v != 1 {
				t.Errorf("fence_lock_frozen{q} = %v, want 1", v)
			}
			if v := value(t, fams, "fence_lock_limit", "lock", "q"); v != 0 {
				t.Errorf("fence_lock_limit{q} = %v, want 0", v)
			}
			if v := value(t, fams, "fence_lock_frozen", "lock", "p/one"); v != 0 {
				t.Errorf("fence_lock_frozen{p/one} = %v, want 0", v)
			}
			if v := value(t, fams, "fence_lock_limit", "lock", "p/one"); v != 2 {
				t.Errorf("fence_lock_limit{p/one} = %v, want 2", v)
			}
			_ = drv.Release(ctx, "p/one", l.ID)
			_, _, _ = lim.ClearLimit(ctx, "q", false)
			_, _, _ = lim.ClearLimit(ctx, "p/", true)
		})
	}
}

// TestShardEvents: the moves of a fence shards group's shards and the
// restarts of its members' commands, as fence shards run records them, are
// counted by fence_lock_events_total; the kinds of a shard and of a member
// are exported from 0, so that increase() sees their first event.
func TestShardEvents(t *testing.T) {
	b := backends(t)[0]
	drv := recorder(t, b.open(t))
	ctx := ctxT(t)
	url := serve(t, recorder(t, b.open(t)), exporter.Options{})
	l, err := drv.Acquire(ctx, "g/shard/3", coord.AcquireOptions{TTL: 30 * time.Second, Holder: "a"})
	if err != nil {
		t.Fatal(err)
	}
	m, err := drv.Acquire(ctx, "g/members/a", coord.AcquireOptions{TTL: 30 * time.Second, Holder: "a"})
	if err != nil {
		t.Fatal(err)
	}
	fams := scrape(t, url)
	for _, k := range []string{"shard_taken", "shard_given_up", "shard_lost"} {
		if v := value(t, fams, "fence_lock_events_total", "lock", "g/shard/3", "kind", k); v != 0 {
			t.Errorf("g/shard/3 %s: %v before any, want 0", k, v)
		}
	}
	if v := value(t, fams, "fence_lock_events_total", "lock", "g/members/a", "kind", "restarted"); v != 0 {
		t.Errorf("restarted: %v before any", v)
	}
	for _, ev := range []history.Event{
		{Lock: "g/shard/3", Kind: history.ShardTaken, Holder: "a", Token: l.Token},
		{Lock: "g/shard/3", Kind: history.ShardGivenUp, Holder: "a", Token: l.Token, Reason: "members a → a,b (to b)"},
		{Lock: "g/members/a", Kind: history.Restarted, Holder: "a", Count: 1, Reason: "the member's shards changed"},
		{Lock: "g/members/a", Kind: history.Restarted, Holder: "a", Count: 2, Reason: "the member's shards changed"},
	} {
		ev.Time = time.Now()
		if err := drv.Record(ctx, ev); err != nil {
			t.Fatal(err)
		}
	}
	_ = drv.Release(ctx, l.Name, l.ID)
	_ = drv.Release(ctx, m.Name, m.ID)
	want := map[[2]string]float64{
		{"g/shard/3", "shard_taken"}: 1, {"g/shard/3", "shard_given_up"}: 1, {"g/shard/3", "shard_lost"}: 0,
		{"g/shard/3", "acquired"}: 1, {"g/members/a", "restarted"}: 2,
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		fams := scrape(t, url)
		ok := true
		for k, v := range want {
			if got := value(t, fams, "fence_lock_events_total", "lock", k[0], "kind", k[1]); got != v {
				ok = false
				if time.Now().After(deadline) {
					t.Errorf("%s %s: %v, want %v", k[0], k[1], got, v)
				}
			}
		}
		if ok || time.Now().After(deadline) {
			break
		}
	}
	// Each kind is collected once, also a shard's kinds that are among its
	// events (a second copy fails the gathering).
	col, err := exporter.NewCollector(ctx, recorder(t, b.open(t)), exporter.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(col)
	if _, err := reg.Gather(); err != nil {
		t.Errorf("gathering: %v", err)
	}
}

// TestSemaphoreHolders: a semaphore's every holder is exported, by slot
// (fence_lock_slot_token with its holder), beside its slots and how many
// hold it; a lock has 1 slot.
func TestSemaphoreHolders(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			ctx := ctxT(t)
			c := b.open(t)
			var ls []*coord.Lease
			for i := range 2 {
				l, err := c.Acquire(ctx, "sem", coord.AcquireOptions{TTL: 30 * time.Second, Holder: fmt.Sprintf("h%d", i), Slots: 3})
				if err != nil {
					t.Fatal(err)
				}
				ls = append(ls, l)
			}
			plain, err := c.Acquire(ctx, "plain", coord.AcquireOptions{TTL: 30 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			fams := scrape(t, serve(t, recorder(t, b.open(t)), exporter.Options{}))
			if v := value(t, fams, "fence_lock_slots", "lock", "sem"); v != 3 {
				t.Errorf("fence_lock_slots{sem} = %v, want 3", v)
			}
			if v := value(t, fams, "fence_lock_holders", "lock", "sem"); v != 2 {
				t.Errorf("fence_lock_holders{sem} = %v, want 2", v)
			}
			for _, l := range ls {
				m, ok := metric(fams, "fence_lock_slot_token", map[string]string{"lock": "sem", "slot": fmt.Sprint(l.Slot), "holder": l.Holder})
				if !ok || m.GetGauge().GetValue() != float64(l.Token) {
					t.Errorf("fence_lock_slot_token{sem, slot %d, %s}: %v, want token %d", l.Slot, l.Holder, m, l.Token)
				}
			}
			if v := value(t, fams, "fence_lock_slots", "lock", "plain"); v != 1 {
				t.Errorf("fence_lock_slots{plain} = %v, want 1", v)
			}
			if v := value(t, fams, "fence_lock_holders", "lock", "plain"); v != 1 {
				t.Errorf("fence_lock_holders{plain} = %v, want 1", v)
			}
			for _, l := range append(ls, plain) {
				_ = c.Release(ctx, l.Name, l.ID)
			}
		})
	}
}

// TestLimitFollowed: a freeze and a thaw after the exporter started show in
// fence_lock_frozen and fence_lock_limit, on a held lock and on a free one.
func TestLimitFollowed(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			ctx := ctxT(t)
			drv := b.open(t)
			l, err := drv.Acquire(ctx, "lim/held", coord.AcquireOptions{TTL: 30 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			defer drv.Release(ctx, l.Name, l.ID)
			url := serve(t, b.open(t), exporter.Options{})
			scrape(t, url)
			// until waits for want (-1: no fence_lock_limit) on both locks.
			until := func(want float64) {
				t.Helper()
				for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
					fams := scrape(t, url)
					ok := true
					for _, n := range []string{"lim/held", "lim/free"} {
						m, has := metric(fams, "fence_lock_limit", map[string]string{"lock": n})
						frozen, _ := metric(fams, "fence_lock_frozen", map[string]string{"lock": n})
						ok = ok && has == (want >= 0) && (!has || m.GetGauge().GetValue() == want) &&
							frozen.GetGauge().GetValue() == b2f(want == 0)
					}
					if ok {
						return
					}
					if time.Now().After(deadline) {
						t.Fatalf("fence_lock_limit never %v on both locks", want)
					}
				}
			}
			for _, n := range []string{"lim/held", "lim/free"} {
				if err := drv.SetLimit(ctx, coord.Limit{Name: n, Max: 0, Reason: "test"}); err != nil {
					t.Fatal(err)
				}
			}
			until(0)
			for _, n := range []string{"lim/held", "lim/free"} {
				if _, _, err := drv.ClearLimit(ctx, n, false); err != nil {
					t.Fatal(err)
				}
			}
			until(-1)
		})
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// TestExpiryOnPostgres: a lease that runs out with no later holder ends its
// section on PostgreSQL too, whose watch does not report an expiry (nothing
// is written then): from the List of a scrape.
func TestExpiryOnPostgres(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL")
	}
	srv := pgtest.Start(t)
	url := srv.URL(srv.CreateDatabase(t))
	open := func() coord.Coordinator {
		c, err := postgres.Open(ctxT(t), url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	drv := open()
	base := serve(t, open(), exporter.Options{})
	if _, err := drv.Acquire(ctxT(t), "x", coord.AcquireOptions{TTL: 500 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // the watch reports the holder
	if v := value(t, scrape(t, base), "fence_lock_held", "lock", "x"); v != 1 {
		t.Fatalf("held %v", v)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		fams := scrape(t, base)
		if n, _ := histogram(t, fams, "x"); n == 1 && value(t, fams, "fence_lock_held", "lock", "x") == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("x still held, or its section not observed, long after its TTL")
		}
	}
}
