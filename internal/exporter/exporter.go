// Package exporter serves Prometheus metrics for every lock of a coordinator
// (`fence exporter --listen ADDR`), with client_golang.
//
// The metrics, per lock (label lock) and of the exporter itself, are listed
// in docs/observability.md (keep it in step with Collect), beside the Go
// and process collectors.
//
// A lock the coordinator has not listed for Options.Retention (etcd lists
// no free lock: a lock nobody holds, waits for or limits is gone) is no
// longer exported, its histograms included; it comes back when it is used
// again.
//
// /healthz answers 200 when the coordinator answered a read within the last
// healthFresh (else it reads it, within healthTimeout), 503 otherwise,
// with one line saying why.
//
// # How it is fed
//
// The state comes from one Watch of the coordinator, started before a
// first List; a watch that fails is started again (package follow), and
// each start or reset of the watch is followed by a List. Each scrape also
// Lists the locks (within scrapeTimeout) to refresh the time left on leases
// (etcd renewals are not visible to a watch) and to catch what a watch
// restart missed. Holder changes are taken in order: tokens only grow, so a
// state with a smaller token than one already seen is stale and dropped; a
// lease's end is taken from the watch when the watch also reported its
// start, otherwise from a List; a List does not change a lock the watch
// changed while it read (the List may be older). The histogram observes a
// holder's time from its acquired_at to the moment its end was seen, so
// sections that end between two scrapes are all counted when the watch sees
// them. It does not come from the history, which has no end of a lease that
// expired with no later holder (the next one records expired) and nothing
// of a lock taken without recording. History counters are read at each
// scrape, from each lock's sequence number on (history.Store), and start
// from the history kept when the exporter starts.
package exporter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/fence-dev/fence/internal/etcdbugs"
	"github.com/fence-dev/fence/internal/follow"
	"github.com/fence-dev/fence/internal/history/auto"
	"github.com/fence-dev/fence/internal/lockkind"
	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/coord/etcd"
	"github.com/fence-dev/fence/pkg/history"
)

// DefaultRetention is the default Options.Retention.
const DefaultRetention = time.Hour

const (
	// scrapeTimeout bounds the reads of one scrape.
	scrapeTimeout = 5 * time.Second
	// healthFresh is how recent a read must be for /healthz to answer
	// without reading; healthTimeout bounds the read it makes otherwise.
	healthFresh   = time.Second
	healthTimeout = 2 * time.Second
	// versionsEvery is how often the etcd members' versions are asked.
	versionsEvery = 10 * time.Minute
	// healthProbe is the lock /healthz inspects (any name does: a free
	// one is an answer too).
	healthProbe = "fence-exporter-healthz"
)

// sectionBuckets are the buckets of fence_lock_critical_section_seconds, in
// seconds: from 100ms to a day.
var sectionBuckets = []float64{0.1, 0.5, 1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 14400, 43200, 86400}

// waitBuckets are the buckets of fence_lock_wait_seconds, in seconds: from
// 1ms (an uncontended grant) to an hour.
var waitBuckets = []float64{0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600}

// Options configure the exporter. The zero value is usable.
type Options struct {
	// Prefix limits the export to locks whose names start with it.
	Prefix string
	// Logger receives warnings about failed reads (slog.Default()).
	Logger *slog.Logger
	// OnListen, when set, is called by Serve once it listens, with the
	// address (useful with port 0).
	OnListen func(net.Addr)
	// Retention is how long a lock the coordinator no longer lists stays
	// exported (DefaultRetention).
	Retention time.Duration
}

func (o *Options) fill() {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Retention <= 0 {
		o.Retention = DefaultRetention
	}
}

// Serve listens on addr (host:port) and serves Handler until ctx ends, then
// shuts the server down and returns nil. A failure to listen, or of the
// coordinator's first read, is returned at once.
func Serve(ctx context.Context, addr string, c coord.Coordinator, opts Options) error {
	opts.fill()
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("exporter: %w", err)
	}
	h, err := Handler(ctx, c, opts)
	if err != nil {
		ln.Close()
		return err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	if opts.OnListen != nil {
		opts.OnListen(ln.Addr())
	}
	opts.Logger.Info("exporter listening", "addr", ln.Addr().String(), "coordinator", c.Describe())
	select {
	case err := <-done:
		return fmt.Errorf("exporter: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		srv.Close()
	}
	if err := <-done; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("exporter: %w", err)
	}
	return nil
}

// Handler returns the exporter's HTTP handler: /metrics, and a short page
// at /. It reads the coordinator's locks once (an error is returned when
// that fails) and follows its watch until ctx ends.
func Handler(ctx context.Context, c coord.Coordinator, opts Options) (http.Handler, error) {
	col, err := NewCollector(ctx, c, opts)
	if err != nil {
		return nil, err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(col,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	errLog := slog.NewLogLogger(col.opts.Logger.Handler(), slog.LevelWarn)
	errLog.SetPrefix("exporter: ")
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		ErrorLog:      errLog,
		ErrorHandling: promhttp.ContinueOnError,
	}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if err := col.healthy(r.Context()); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintln(w, err)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/{$}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintf(w, "fence exporter for %s\nmetrics: /metrics\nhealth: /healthz\n", c.Describe())
	})
	return mux, nil
}

// Collector is the exporter's prometheus.Collector, for programs that
// register it in a registry of their own.
type Collector struct {
	c    coord.Coordinator
	hist history.Store // nil: the coordinator keeps no history
	opts Options

	scrape sync.Mutex // one scrape's reads at a time

	mu       sync.Mutex
	locks    map[string]*lockState
	watching bool // the watch runs
	listOK   bool // the last List succeeded
	histUp   bool
	sections *prometheus.HistogramVec
	waits    *prometheus.HistogramVec // nil without a history
	// cursors are the history sequence numbers read up to, by lock, also
	// of the locks no longer exported (past Options.Retention): a lock
	// comes back when used again, counting from there.
	cursors map[string]uint64

	lastOK time.Time // the last read the coordinator answered

	// The coordinator's known problems (knownBugs), asked at bugsAt.
	versions    versioner         // nil: not etcd
	replication replicator        // nil: not PostgreSQL
	bugsAt      time.Time         // when they were last asked
	memberVer   map[string]string // etcd: endpoint -> version, as last answered
	asyncRepl   bool              // PostgreSQL: standbys without synchronous replication, as last answered
}

// replicator is a PostgreSQL coordinator, which tells when its server has
// standbys without synchronous replication (a failover can repeat tokens).
type replicator interface {
	ReplicationWarning(ctx context.Context) string
}

// versioner is an etcd coordinator, which reports its members' versions.
type versioner interface {
	ServerVersions(ctx context.Context) []etcd.MemberVersion
}

// lockState is what the exporter knows of one lock.
type lockState struct {
	info      coord.LockInfo
	seen      time.Time // when info was read (monotonic), for the TTL left
	maxToken  uint64    // the largest token seen held
	confirmed bool      // the holder was reported by the watch, which will report its end in order
	watched   time.Time // when the watch last changed info (monotonic)
	goneSince time.Time // since when the lock is not listed (zero while it is)

	renewalFailures float64
	events          map[history.Kind]float64
	lastCompletion  time.Time // of the last completed --once run in the history
}

var (
	descHeld = prometheus.NewDesc("fence_lock_held",
		"1 while the lock has a holder, else 0.", []string{"lock"}, nil)
	descToken = prometheus.NewDesc("fence_lock_token",
		"Fencing token of the lock's holder; when free, the last token known.", []string{"lock"}, nil)
	descTTL = prometheus.NewDesc("fence_lock_ttl_remaining_seconds",
		"Time left on the holder's lease, as of the scrape (0 when free).", []string{"lock"}, nil)
	descHeldFor = prometheus.NewDesc("fence_lock_held_seconds",
		"How long the lock's holder has held it, as of the scrape (0 when free).", []string{"lock"}, nil)
	descWaiters = prometheus.NewDesc("fence_lock_waiters",
		"Processes queued for the lock.", []string{"lock"}, nil)
	descHolder = prometheus.NewDesc("fence_lock_holder_info",
		"The lock's holder, as a label; 1 while held.", []string{"lock", "holder"}, nil)
	descSlots = prometheus.NewDesc("fence_lock_slots",
		"The lock's slots: 1 for a lock, N for a semaphore (--slots N) with holders or waiters.", []string{"lock"}, nil)
	descHolders = prometheus.NewDesc("fence_lock_holders",
		"How many hold the lock (a semaphore: up to its slots).", []string{"lock"}, nil)
	descSlotToken = prometheus.NewDesc("fence_lock_slot_token",
		"Fencing token of the holder of each held slot of a semaphore, with its holder as a label.", []string{"lock", "slot", "holder"}, nil)
	descRenewalFailures = prometheus.NewDesc("fence_lock_renewal_failures_total",
		"Failed lease renewals recorded in the lock's history.", []string{"lock"}, nil)
	descStale = prometheus.NewDesc("fence_lock_stale_refusals_total",
		"Writes refused by a guard because their fencing token was stale.", []string{"lock"}, nil)
	descFrozen = prometheus.NewDesc("fence_lock_frozen",
		"1 while an operator freeze (fence freeze) covers the lock, else 0.", []string{"lock"}, nil)
	descLimit = prometheus.NewDesc("fence_lock_limit",
		"The operator limit on the lock's holders (fence limit; 0 when frozen); absent when none covers it.", []string{"lock"}, nil)
	descEvents = prometheus.NewDesc("fence_lock_events_total",
		"Events recorded in the lock's history, by kind.", []string{"lock", "kind"}, nil)
	descLastCompletion = prometheus.NewDesc("fence_lock_last_completion_timestamp_seconds",
		"Unix time of the lock's last completed --once run in its history.", []string{"lock"}, nil)
	descCoordUp = prometheus.NewDesc("fence_exporter_coordinator_up",
		"1 when the exporter's last read of the coordinator succeeded and its watch runs.", nil, nil)
	descHistUp = prometheus.NewDesc("fence_exporter_history_up",
		"1 when the exporter's last read of the lock histories succeeded.", nil, nil)
	descKnownBug = prometheus.NewDesc("fence_coordinator_known_bug",
		"1 for each etcd server version among the coordinator's members with a known lease-safety bug, and for a PostgreSQL server "+
			"with standbys but no synchronous replication (version \"postgres\", issue \"async-replication\"; see docs/operations.md).", []string{"version", "issue"}, nil)
)

// groupKinds are the kinds also exported from 0 for a lock of a `fence
// shards` group: a shard's moves (GROUP/shard/N) and a member's restarts of
// its command (GROUP/members/ID).
func groupKinds(name string) []history.Kind {
	switch _, member, _, ok := lockkind.Group(name); {
	case !ok:
		return nil
	case member != "":
		return []history.Kind{history.Restarted}
	}
	return []history.Kind{history.ShardTaken, history.ShardGivenUp, history.ShardLost}
}

// allKinds are the history event kinds exported for every lock.
var allKinds = []history.Kind{
	history.Acquired, history.Released, history.RenewalFailed, history.LeaseLost,
	history.DeadlineExceeded, history.Expired, history.Revoked, history.StaleRefused,
	history.Completed, history.Skipped,
}

// NewCollector starts the coordinator's watch and reads its locks and
// history once (an error of the coordinator is returned; one of the
// history is logged), and follows the watch until ctx ends.
func NewCollector(ctx context.Context, c coord.Coordinator, opts Options) (*Collector, error) {
	opts.fill()
	col := &Collector{
		c: c, opts: opts,
		locks:     map[string]*lockState{},
		cursors:   map[string]uint64{},
		memberVer: map[string]string{},
		sections: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "fence_lock_critical_section_seconds",
			Help:    "How long each holder held the lock (from its acquisition to the end of its lease, as seen by the exporter).",
			Buckets: sectionBuckets,
		}, []string{"lock"}),
	}
	col.hist, _ = c.(history.Store)
	col.versions, _ = auto.Backend(c).(versioner)
	col.replication, _ = auto.Backend(c).(replicator)
	if col.hist != nil {
		col.waits = prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "fence_lock_wait_seconds",
			Help:    "How long each holder waited for the lock before it was granted (the history's waited).",
			Buckets: waitBuckets,
		}, []string{"lock"})
	}
	wctx, stop := context.WithCancel(ctx)
	evs := follow.Watch(wctx, c, opts.Prefix)
	if ev := <-evs; ev.Err != nil {
		stop()
		return nil, fmt.Errorf("exporter: %w", ev.Err)
	}
	if err := col.list(ctx); err != nil {
		stop()
		return nil, fmt.Errorf("exporter: %w", err)
	}
	col.watching = true
	if col.hist != nil {
		rctx, cancel := context.WithTimeout(ctx, scrapeTimeout)
		defer cancel()
		col.readHistory(rctx)
	}
	go func() {
		defer stop()
		col.run(wctx, evs)
	}()
	return col, nil
}

// run applies the watch's events (package follow starts it again when it
// fails) until ctx ends.
func (col *Collector) run(ctx context.Context, evs <-chan follow.Event) {
	for ev := range evs {
		switch {
		case ev.Err != nil:
			col.setWatching(false)
			col.opts.Logger.Warn("exporter: the coordinator's watch failed; starting it again", "coordinator", col.c.Describe(), "err", ev.Err)
		case ev.Type == coord.EventReset:
			col.setWatching(true)
			col.list(ctx)
		case ev.Info.Name != "" && strings.HasPrefix(ev.Info.Name, col.opts.Prefix):
			col.mu.Lock()
			col.apply(ev.Info, true)
			col.mu.Unlock()
		}
	}
}

// list reads every lock (within scrapeTimeout) and applies them: the locks
// it shows, and the known locks it does not show as free, but not a lock
// the watch changed while it read (see the package doc). A failure is
// logged and returned.
func (col *Collector) list(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, scrapeTimeout)
	defer cancel()
	began := time.Now()
	infos, err := col.c.List(ctx, col.opts.Prefix)
	col.noteRead(err)
	col.mu.Lock()
	defer col.mu.Unlock()
	col.listOK = err == nil
	if err != nil {
		col.opts.Logger.Warn("exporter: list", "err", err)
		return err
	}
	listed := make(map[string]bool, len(infos))
	for _, info := range infos {
		if !strings.HasPrefix(info.Name, col.opts.Prefix) {
			continue
		}
		listed[info.Name] = true
		st := col.state(info.Name)
		if !st.watched.After(began) {
			col.apply(info, false)
		}
		st.goneSince = time.Time{}
	}
	now := time.Now()
	for name, st := range col.locks {
		if listed[name] || st.watched.After(began) {
			continue
		}
		col.apply(coord.LockInfo{Name: name}, false)
		if st.goneSince.IsZero() {
			st.goneSince = now
		}
		if now.Sub(st.goneSince) >= col.opts.Retention && !st.info.Held {
			col.forget(name)
		}
	}
	return nil
}

// setWatching notes that the watch started or failed: either way it may
// have missed changes, so no holder is confirmed any more.
func (col *Collector) setWatching(on bool) {
	col.mu.Lock()
	defer col.mu.Unlock()
	col.watching = on
	for _, st := range col.locks {
		st.confirmed = false
	}
}

// forget stops exporting a lock that has been gone for the retention.
func (col *Collector) forget(name string) {
	delete(col.locks, name)
	col.sections.DeleteLabelValues(name)
	if col.waits != nil {
		col.waits.DeleteLabelValues(name)
	}
}

// apply takes in a lock's state, from the watch (ordered) or from a List
// (fresh, but possibly older than watch events still in flight).
func (col *Collector) apply(info coord.LockInfo, fromWatch bool) {
	st := col.state(info.Name)
	now := time.Now()
	top := slices.Max(append(tokens(info), 0)) // a semaphore's state is as new as its newest holder
	switch {
	case info.Held && (top < st.maxToken || top == st.maxToken && !st.info.Held):
		return // an older holder, or one whose end was seen: stale
	case !info.Held && st.info.Held && fromWatch && !st.confirmed:
		return // may be the end of an older lease; the next List tells
	}
	col.endSection(st, info, now)
	same := info.Held && top == st.maxToken // renewed, or its waiters changed
	st.confirmed = info.Held && (fromWatch || same && st.confirmed)
	st.info, st.seen, st.maxToken = info, now, max(st.maxToken, top)
	if fromWatch {
		st.watched = now
	}
	if info.Held {
		st.goneSince = time.Time{}
	}
}

// tokens are the tokens of the holders of info.
func tokens(info coord.LockInfo) []uint64 {
	var ts []uint64
	for _, h := range info.AllHolders() {
		ts = append(ts, h.Token)
	}
	return ts
}

// endSection observes the critical section of each holder in st that next,
// the lock's new state, no longer has (a lock's one holder; each holder of
// a semaphore that left).
func (col *Collector) endSection(st *lockState, next coord.LockInfo, now time.Time) {
	for _, h := range st.info.AllHolders() {
		stays := slices.ContainsFunc(next.AllHolders(), func(n coord.HolderInfo) bool { return n.Token == h.Token })
		if stays || h.AcquiredAt.IsZero() {
			continue
		}
		col.sections.WithLabelValues(st.info.Name).Observe(max(0, now.Sub(h.AcquiredAt).Seconds()))
	}
}

func (col *Collector) state(name string) *lockState {
	st := col.locks[name]
	if st == nil {
		// Not listed until a List says so.
		st = &lockState{info: coord.LockInfo{Name: name}, events: map[history.Kind]float64{}, goneSince: time.Now()}
		col.locks[name] = st
	}
	return st
}

// readHistory counts the history events written since the last read.
func (col *Collector) readHistory(ctx context.Context) {
	heads, err := col.hist.Heads(ctx)
	ok := err == nil
	if err != nil {
		col.opts.Logger.Warn("exporter: history", "err", err)
	}
	for _, h := range heads {
		if !strings.HasPrefix(h.Lock, col.opts.Prefix) {
			continue
		}
		col.mu.Lock()
		cursor := col.cursors[h.Lock]
		col.mu.Unlock()
		if h.Seq == cursor {
			continue // nothing new (a forgotten lock stays so)
		}
		if h.Seq < cursor {
			cursor = 0 // the history was removed and started again
		}
		ents, err := col.hist.Since(ctx, h.Lock, cursor)
		if err != nil {
			col.opts.Logger.Warn("exporter: history", "lock", h.Lock, "err", err)
			ok = false
			continue
		}
		col.mu.Lock()
		st := col.state(h.Lock)
		col.cursors[h.Lock] = h.Seq
		for _, e := range ents {
			col.cursors[h.Lock] = max(col.cursors[h.Lock], e.Seq)
			st.events[e.Event.Kind]++
			switch e.Event.Kind {
			case history.RenewalFailed:
				st.renewalFailures += float64(max(e.Event.Count, 1))
			case history.Acquired:
				col.waits.WithLabelValues(h.Lock).Observe(max(e.Event.Wait, 0).Seconds())
			case history.Completed:
				if e.Event.Time.After(st.lastCompletion) {
					st.lastCompletion = e.Event.Time
				}
			}
		}
		col.mu.Unlock()
	}
	col.mu.Lock()
	col.histUp = ok
	col.mu.Unlock()
}

// Describe implements prometheus.Collector.
func (col *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descHeld, descToken, descTTL, descHeldFor, descWaiters, descHolder, descSlots, descHolders, descSlotToken, descFrozen, descLimit, descCoordUp, descKnownBug} {
		ch <- d
	}
	if col.hist != nil {
		for _, d := range []*prometheus.Desc{descRenewalFailures, descStale, descEvents, descLastCompletion, descHistUp} {
			ch <- d
		}
	}
	col.sections.Describe(ch)
	if col.waits != nil {
		col.waits.Describe(ch)
	}
}

// Collect implements prometheus.Collector: it reads the locks (and the
// history) afresh, then reports what it knows.
func (col *Collector) Collect(ch chan<- prometheus.Metric) {
	col.refresh()
	col.mu.Lock()
	defer col.mu.Unlock()
	now := time.Now()
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
	}
	for _, n := range slices.Sorted(maps.Keys(col.locks)) {
		st := col.locks[n]
		held, ttl := 0.0, 0.0
		if st.info.Held {
			held = 1
			ttl = max(0, (st.info.TTLLeft - now.Sub(st.seen)).Seconds())
			gauge(descHolder, 1, n, st.info.Holder)
		}
		gauge(descHeld, held, n)
		gauge(descSlots, float64(max(st.info.Slots, 1)), n)
		gauge(descHolders, float64(len(st.info.AllHolders())), n)
		for _, h := range st.info.Holders { // a semaphore's
			gauge(descSlotToken, float64(h.Token), n, strconv.Itoa(h.Slot), h.Holder)
		}
		gauge(descToken, float64(max(st.maxToken, st.info.LastToken)), n)
		gauge(descTTL, ttl, n)
		gauge(descHeldFor, st.info.HeldFor(now).Seconds(), n)
		gauge(descWaiters, float64(st.info.Waiters), n)
		lim := st.info.Limit
		gauge(descFrozen, b2f(lim != nil && lim.Max == 0), n)
		if lim != nil {
			gauge(descLimit, float64(lim.Max), n)
		}
		if col.hist != nil {
			counter(descRenewalFailures, st.renewalFailures, n)
			counter(descStale, st.events[history.StaleRefused], n)
			if !st.lastCompletion.IsZero() {
				gauge(descLastCompletion, float64(st.lastCompletion.UnixNano())/1e9, n)
			}
			// Every kind, from 0, so that increase() sees the first one;
			// each once.
			kinds := slices.Concat(allKinds, groupKinds(n), slices.Collect(maps.Keys(st.events)))
			slices.Sort(kinds)
			for _, k := range slices.Compact(kinds) {
				counter(descEvents, st.events[k], n, string(k))
			}
		}
	}
	gauge(descCoordUp, b2f(col.watching && col.listOK))
	for _, vb := range col.knownBugs() {
		gauge(descKnownBug, 1, vb[0], vb[1])
	}
	if col.hist != nil {
		gauge(descHistUp, b2f(col.histUp))
	}
	col.sections.Collect(ch)
	if col.waits != nil {
		col.waits.Collect(ch)
	}
}

// refresh reads the locks and the history for a scrape.
func (col *Collector) refresh() {
	col.scrape.Lock()
	defer col.scrape.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()
	col.list(ctx)
	if col.hist != nil {
		col.readHistory(ctx)
	}
	col.askVersions(ctx)
}

// noteRead notes the outcome of a read of the coordinator, for /healthz.
func (col *Collector) noteRead(err error) {
	col.mu.Lock()
	defer col.mu.Unlock()
	if err == nil || errors.Is(err, coord.ErrNotHeld) {
		col.lastOK = time.Now()
	}
}

// healthy returns nil when the coordinator answered a read within
// healthFresh, or answers one now (within healthTimeout); else why not.
func (col *Collector) healthy(ctx context.Context) error {
	col.mu.Lock()
	fresh := time.Since(col.lastOK) < healthFresh
	col.mu.Unlock()
	if fresh {
		return nil
	}
	rctx, cancel := context.WithTimeout(ctx, healthTimeout)
	defer cancel()
	_, err := col.c.Inspect(rctx, healthProbe)
	col.noteRead(err)
	if err == nil || errors.Is(err, coord.ErrNotHeld) {
		return nil
	}
	col.mu.Lock()
	defer col.mu.Unlock()
	since := "never answered"
	if !col.lastOK.IsZero() {
		since = fmt.Sprintf("no answer for %s (since %s)", time.Since(col.lastOK).Truncate(time.Second), col.lastOK.UTC().Format(time.RFC3339))
	}
	return fmt.Errorf("coordinator %s: %s: %v", col.c.Describe(), since, err)
}

// askVersions asks, every versionsEvery, the etcd members for their
// versions (more often until every member answered once), or a PostgreSQL
// server whether it has standbys without synchronous replication.
func (col *Collector) askVersions(ctx context.Context) {
	col.mu.Lock()
	due := time.Since(col.bugsAt) >= versionsEvery || col.versions != nil && len(col.memberVer) == 0
	col.mu.Unlock()
	if !due || col.versions == nil && col.replication == nil {
		return
	}
	vctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	var vs []etcd.MemberVersion
	async := false
	if col.versions != nil {
		vs = col.versions.ServerVersions(vctx)
	} else {
		async = col.replication.ReplicationWarning(vctx) != ""
	}
	col.mu.Lock()
	defer col.mu.Unlock()
	col.bugsAt, col.asyncRepl = time.Now(), async
	for _, v := range vs {
		if v.Err == nil {
			col.memberVer[v.Endpoint] = v.Version
		}
	}
}

// knownBugs are the (version, issue) pairs of the members' known
// lease-safety bugs, sorted. col.mu is held.
func (col *Collector) knownBugs() [][2]string {
	var out [][2]string
	for _, v := range col.memberVer {
		for _, b := range etcdbugs.BugsOf(v) {
			out = append(out, [2]string{v, b.Issue})
		}
	}
	if col.asyncRepl {
		out = append(out, [2]string{"postgres", "async-replication"})
	}
	slices.SortFunc(out, func(a, b [2]string) int { return strings.Compare(a[0]+" "+a[1], b[0]+" "+b[1]) })
	return slices.Compact(out) // members of one version
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
