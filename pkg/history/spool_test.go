package history_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fence-dev/fence/internal/syncbuf"
	"github.com/fence-dev/fence/pkg/coord/local"
	"github.com/fence-dev/fence/pkg/history"
	"github.com/fence-dev/fence/pkg/history/localstore"
)

// downStore is a store that refuses every write while down is set: a
// coordinator that does not answer; while unanswered is set it writes and
// then fails: a coordinator that took the write and stalled before its
// answer; while partial is set it writes the events of the first lock in a
// call and then fails: a coordinator lost part way through a write.
type downStore struct {
	history.Store
	down       atomic.Bool
	unanswered atomic.Bool
	partial    atomic.Bool
}

var errDown = errors.New("injected: coordinator does not answer")

func (s *downStore) Record(ctx context.Context, ev history.Event) error {
	return s.Append(ctx, []history.Event{ev})
}

func (s *downStore) Append(ctx context.Context, evs []history.Event) error {
	if s.down.Load() {
		return errDown
	}
	if s.partial.Load() {
		n := 1
		for n < len(evs) && evs[n].Lock == evs[0].Lock {
			n++
		}
		if err := s.Store.Append(ctx, evs[:n]); err != nil {
			return err
		}
		return errDown
	}
	if s.unanswered.Load() {
		if err := s.Store.Append(ctx, evs); err != nil {
			return err
		}
		return errDown
	}
	return s.Store.Append(ctx, evs)
}

// spoolRig is a store on a local state directory and a spool directory
// beside it, for Recorders that come and go as fence commands do.
type spoolRig struct {
	t     *testing.T
	state string
	spool string
	store *downStore
	logs  syncbuf.Buffer
}

func newSpoolRig(t *testing.T) *spoolRig {
	state := filepath.Join(t.TempDir(), "state")
	s, err := localstore.Open(state)
	if err != nil {
		t.Fatal(err)
	}
	return &spoolRig{t: t, state: state, spool: filepath.Join(state, "spool"), store: &downStore{Store: s}}
}

// recorder is one command's Recorder, with the spool.
func (g *spoolRig) recorder() history.Recorder {
	c, err := local.Open(g.state)
	if err != nil {
		g.t.Fatal(err)
	}
	return history.Wrap(c, g.store, history.WithSpool(g.spool), history.WithMaxPending(2000),
		history.WithLogger(slog.New(slog.NewTextHandler(&g.logs, nil))))
}

// fail has a Recorder fail to write evs while the store is down, then
// closes it: they go to the spool.
func (g *spoolRig) fail(evs ...history.Event) {
	g.store.down.Store(true)
	defer g.store.down.Store(false)
	r := g.recorder()
	if err := r.Append(ctxT(g.t), evs); err == nil {
		g.t.Fatal("Append with the store down succeeded")
	}
	if err := r.Close(); err != nil {
		g.t.Fatal(err)
	}
}

// flush flushes the spool with a new Recorder.
func (g *spoolRig) flush() (int, error) {
	r := g.recorder()
	defer r.Close()
	return r.FlushSpool(ctxT(g.t))
}

func (g *spoolRig) files(pattern string) []string {
	m, _ := filepath.Glob(filepath.Join(g.spool, pattern))
	return m
}

var spoolT0 = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

func counted(lock string, i int) history.Event {
	return history.Event{Time: spoolT0.Add(time.Duration(i) * time.Millisecond), Lock: lock, Kind: history.RenewalFailed,
		Holder: "h", Token: 7, Count: i}
}

// TestSpoolKeepsAndFlushes: events a Recorder could not write by its close
// are kept in the spool (a file 0600 in a 0700 directory) and written by
// the next Recorder's FlushSpool with their original times and fields,
// once: a flush while the store is still down leaves them, a second flush
// finds nothing.
func TestSpoolKeepsAndFlushes(t *testing.T) {
	g := newSpoolRig(t)
	if n, err := g.flush(); n != 0 || err != nil {
		t.Fatalf("FlushSpool without a spool = %d, %v", n, err)
	}
	lost := history.Event{Time: spoolT0.Add(time.Second), Lock: "a", Kind: history.LeaseLost, Holder: "h", Token: 7, Error: "not renewed"}
	rel := history.Event{Time: spoolT0.Add(2 * time.Second), Lock: "b", Kind: history.Released, Holder: "h", Token: 3, HeldFor: 90 * time.Second}
	g.fail(counted("a", 2), lost, rel)
	if !strings.Contains(g.logs.String(), "kept on this host") || !strings.Contains(g.logs.String(), "events=3") {
		t.Errorf("the close did not say the events were kept:\n%s", g.logs.String())
	}
	files := g.files("*.jsonl")
	if len(files) != 1 {
		t.Fatalf("spool files %v, want one", files)
	}
	for path, want := range map[string]os.FileMode{g.spool: 0o700, files[0]: 0o600} {
		if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != want {
			t.Errorf("%s: mode %v, %v; want %v", path, fi.Mode(), err, want)
		}
	}

	g.store.down.Store(true)
	if n, err := g.flush(); n != 0 || !errors.Is(err, errDown) {
		t.Fatalf("FlushSpool with the store down = %d, %v; want 0 and its error", n, err)
	}
	g.store.down.Store(false)
	if got := g.files("*"); len(got) != 1 || got[0] != files[0] {
		t.Fatalf("after a failed flush the spool holds %v, want %v as it was", got, files)
	}

	if n, err := g.flush(); n != 3 || err != nil {
		t.Fatalf("FlushSpool = %d, %v; want 3", n, err)
	}
	if n, err := g.flush(); n != 0 || err != nil {
		t.Fatalf("second FlushSpool = %d, %v; want 0", n, err)
	}
	if left := g.files("*"); len(left) != 0 {
		t.Errorf("spool not empty after the flush: %v", left)
	}
	for lock, want := range map[string][]history.Event{"a": {counted("a", 2), lost}, "b": {rel}} {
		got, err := g.store.History(ctxT(t), lock, 0)
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprintf("%+v", got) != fmt.Sprintf("%+v", want) {
			t.Errorf("history of %s:\n got %+v\nwant %+v", lock, got, want)
		}
	}
}

// TestSpoolBound: the spool keeps at most history.SpoolMaxEvents events;
// beyond, the oldest file is dropped and the count logged, and the flush
// writes the newest events.
func TestSpoolBound(t *testing.T) {
	g := newSpoolRig(t)
	const each = 400 // three closes: 1200 events, 200 beyond the bound
	for c := 0; c < 3; c++ {
		var evs []history.Event
		for i := 1; i <= each; i++ {
			evs = append(evs, counted("bound", c*each+i))
		}
		g.fail(evs...)
	}
	if !strings.Contains(g.logs.String(), "spool full") || !strings.Contains(g.logs.String(), fmt.Sprintf("dropped=%d", each)) {
		t.Errorf("no warning of the %d events dropped:\n%s", each, g.logs.String())
	}
	if n, err := g.flush(); n != 2*each || err != nil {
		t.Fatalf("FlushSpool = %d, %v; want %d", n, err, 2*each)
	}
	evs, err := g.store.History(ctxT(t), "bound", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 2*each || evs[0].Count != each+1 || evs[len(evs)-1].Count != 3*each {
		t.Fatalf("%d events from count %d to %d; want %d, the newest (%d to %d)",
			len(evs), evs[0].Count, evs[len(evs)-1].Count, 2*each, each+1, 3*each)
	}
	if history.SpoolMaxEvents != 1000 {
		t.Fatalf("the test assumes a bound of 1000 events, not %d", history.SpoolMaxEvents)
	}
}

// TestSpoolConcurrentFlush: Recorders flushing one spool at once (fence
// commands starting together on a host) write each kept event once.
func TestSpoolConcurrentFlush(t *testing.T) {
	g := newSpoolRig(t)
	const files, each, flushers = 20, 10, 4
	for f := 0; f < files; f++ {
		var evs []history.Event
		for i := 1; i <= each; i++ {
			evs = append(evs, counted("conc", f*each+i))
		}
		g.fail(evs...)
	}
	var wg sync.WaitGroup
	var total atomic.Int64
	start := make(chan struct{})
	for i := 0; i < flushers; i++ {
		r := g.recorder()
		defer r.Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			n, err := r.FlushSpool(ctxT(t))
			if err != nil {
				t.Error(err)
			}
			total.Add(int64(n))
		}()
	}
	close(start)
	wg.Wait()
	evs, err := g.store.History(ctxT(t), "conc", 0)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]int{}
	for _, ev := range evs {
		seen[ev.Count]++
	}
	if total.Load() != files*each || len(evs) != files*each || len(seen) != files*each {
		t.Fatalf("flushes wrote %d, history holds %d events, %d distinct; want %d each", total.Load(), len(evs), len(seen), files*each)
	}
}

// TestSpoolDamagedFile: a damaged spool file (not JSON, a line cut short,
// an event without a time, a symbolic link) is set aside as *.bad with a
// warning, never a crash, and the other files are written; a claim left by
// a flush that died long ago is taken up again.
func TestSpoolDamagedFile(t *testing.T) {
	g := newSpoolRig(t)
	g.fail(counted("dmg", 1))
	damaged := map[string]string{
		"0-garbage.jsonl":   "not json\n",
		"1-cut.jsonl":       `{"time":"2030-01-02T03:04:05Z","lock":"dmg","kind":"lease_lo`,
		"2-notime.jsonl":    `{"lock":"dmg","kind":"lease_lost"}` + "\n",
		"3-badkind.jsonl":   `{"time":"2030-01-02T03:04:05Z","lock":"dmg","kind":"bogus"}` + "\n",
		"4-otherlock.jsonl": `{"time":"2030-01-02T03:04:05Z","lock":"","kind":"acquired"}` + "\n",
	}
	for name, data := range damaged {
		if err := os.WriteFile(filepath.Join(g.spool, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	target := filepath.Join(t.TempDir(), "elsewhere")
	if err := os.WriteFile(target, []byte(`{"time":"2030-01-02T03:04:05Z","lock":"dmg","kind":"lease_lost"}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, filepath.Join(g.spool, "5-link.jsonl")); err != nil {
		t.Fatal(err)
	}
	// A claim of a flush that died two minutes ago.
	stale := fmt.Sprintf("6-stale.jsonl.%d.flushing", time.Now().Add(-2*time.Minute).UnixNano())
	if err := os.WriteFile(filepath.Join(g.spool, stale), []byte(`{"time":"2030-01-02T03:04:06Z","lock":"dmg","kind":"lease_lost"}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	if n, err := g.flush(); n != 2 || err != nil {
		t.Fatalf("FlushSpool = %d, %v; want 2 (the good file and the stale claim)", n, err)
	}
	if got := kinds(t, g.store, "dmg"); got != "renewal_failed:h:7 lease_lost::0" {
		t.Errorf("history %q, want the good file's renewal_failed, then the stale claim's lease_lost (by file name)", got)
	}
	bad := g.files("*.bad")
	if len(bad) != len(damaged)+1 {
		t.Errorf("set aside: %v; want the %d damaged files", bad, len(damaged)+1)
	}
	if c := strings.Count(g.logs.String(), "damaged spool file set aside"); c != len(damaged)+1 {
		t.Errorf("%d warnings of a damaged file, want %d:\n%s", c, len(damaged)+1, g.logs.String())
	}
	if _, err := os.Stat(target); err != nil {
		t.Errorf("the symbolic link's target was touched: %v", err)
	}
	before := g.logs.String()
	if n, err := g.flush(); n != 0 || err != nil || g.logs.String() != before {
		t.Errorf("second FlushSpool = %d, %v, logged %q; want nothing (set-aside files are left alone)", n, err, strings.TrimPrefix(g.logs.String(), before))
	}
}

// TestSpoolWrittenButUnanswered: an event whose write the store took but
// never answered is spooled, and the flush finds it in the lock's history
// and does not write it a second time (TestRunHistoryKeptThroughStall saw
// renewal_failed twice after an etcd stall).
func TestSpoolWrittenButUnanswered(t *testing.T) {
	g := newSpoolRig(t)
	lost := history.Event{Time: spoolT0.Add(time.Second), Lock: "a", Kind: history.LeaseLost, Holder: "h", Token: 7, Error: "not renewed"}
	g.store.unanswered.Store(true)
	r := g.recorder()
	if err := r.Append(ctxT(t), []history.Event{counted("a", 2)}); err == nil {
		t.Fatal("Append with the answer lost succeeded")
	}
	g.store.unanswered.Store(false)
	g.store.down.Store(true)
	if err := r.Append(ctxT(t), []history.Event{lost}); err == nil {
		t.Fatal("Append with the store down succeeded")
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	g.store.down.Store(false)
	if _, err := g.flush(); err != nil {
		t.Fatal(err)
	}
	got, err := g.store.History(ctxT(t), "a", 0)
	if err != nil {
		t.Fatal(err)
	}
	if want := []history.Event{counted("a", 2), lost}; fmt.Sprintf("%+v", got) != fmt.Sprintf("%+v", want) {
		t.Errorf("history of a:\n got %+v\nwant %+v (each once)", got, want)
	}
}

// TestSpoolFlushFailsPartWay: a flush whose write fails after the store
// took one lock's events and before the other's keeps the spool file; the
// next flush writes the rest and not the part already written: each event
// once, none lost.
func TestSpoolFlushFailsPartWay(t *testing.T) {
	g := newSpoolRig(t)
	lost := history.Event{Time: spoolT0.Add(time.Second), Lock: "a", Kind: history.LeaseLost, Holder: "h", Token: 7, Error: "not renewed"}
	rel := history.Event{Time: spoolT0.Add(2 * time.Second), Lock: "b", Kind: history.Released, Holder: "h", Token: 3, HeldFor: 90 * time.Second}
	g.fail(counted("a", 2), lost, rel)

	g.store.partial.Store(true)
	if _, err := g.flush(); !errors.Is(err, errDown) {
		t.Fatalf("FlushSpool failing part way = %v, want its error", err)
	}
	g.store.partial.Store(false)
	if got := g.files("*.jsonl"); len(got) != 1 {
		t.Fatalf("after a flush that failed part way the spool holds %v, want its file", got)
	}
	if a, err := g.store.History(ctxT(t), "a", 0); err != nil || len(a) != 2 {
		t.Fatalf("the failed flush wrote %+v, %v of a; want its 2 events", a, err)
	}

	if _, err := g.flush(); err != nil {
		t.Fatal(err)
	}
	if left := g.files("*"); len(left) != 0 {
		t.Errorf("spool not empty after the flush: %v", left)
	}
	for lock, want := range map[string][]history.Event{"a": {counted("a", 2), lost}, "b": {rel}} {
		got, err := g.store.History(ctxT(t), lock, 0)
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprintf("%+v", got) != fmt.Sprintf("%+v", want) {
			t.Errorf("history of %s:\n got %+v\nwant %+v (each once)", lock, got, want)
		}
	}
}

// TestSpoolRefusedEventAlone: a spooled event the store refuses for good (too
// large once encoded, which the spool does not check) is dropped alone: the
// flush writes the other events of its file, of its lock too, and empties
// the spool.
func TestSpoolRefusedEventAlone(t *testing.T) {
	g := newSpoolRig(t)
	ctrl := strings.Repeat("\x01", 1000) // 6 bytes each in JSON
	big := history.Event{Time: spoolT0.Add(time.Second), Lock: "a", Kind: history.RenewalFailed,
		Holder: ctrl, Error: ctrl, Reason: ctrl}
	g.fail(counted("a", 1), big, counted("a", 3))
	if _, err := g.flush(); err != nil {
		t.Fatal(err)
	}
	if left := g.files("*"); len(left) != 0 {
		t.Errorf("spool not empty after the flush: %v", left)
	}
	got, err := g.store.History(ctxT(t), "a", 0)
	if err != nil {
		t.Fatal(err)
	}
	if want := []history.Event{counted("a", 1), counted("a", 3)}; fmt.Sprintf("%+v", got) != fmt.Sprintf("%+v", want) {
		t.Errorf("history of a:\n got %+v\nwant %+v", got, want)
	}
}

// TestSpoolByteBound: of one close's events beyond the spool's 1 MiB, the
// newest that fit are kept (the file within the bound), the others counted
// as dropped, and the flush writes those kept, oldest first.
func TestSpoolByteBound(t *testing.T) {
	g := newSpoolRig(t)
	const n = 990 // about 1.1 KiB each: some 1.1 MB in all
	var evs []history.Event
	for i := 1; i <= n; i++ {
		ev := counted("bytes", i)
		ev.Error = strings.Repeat("x", 1000)
		evs = append(evs, ev)
	}
	g.fail(evs...)
	files := g.files("*.jsonl")
	if len(files) != 1 {
		t.Fatalf("spool files %v, want one", files)
	}
	fi, err := os.Stat(files[0])
	if err != nil || fi.Size() > 1<<20 || fi.Size() < 1<<20-2048 {
		t.Fatalf("spool file: %v, %v; want at most 1 MiB, and no event more fitting", fi.Size(), err)
	}
	kept, err := g.flush()
	if err != nil || kept >= n || kept == 0 {
		t.Fatalf("FlushSpool = %d, %v; want fewer than %d", kept, err, n)
	}
	if !strings.Contains(g.logs.String(), fmt.Sprintf("dropped=%d", n-kept)) {
		t.Errorf("no warning of the %d events dropped:\n%s", n-kept, g.logs.String())
	}
	got, err := g.store.History(ctxT(t), "bytes", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != kept || got[0].Count != n-kept+1 || got[len(got)-1].Count != n {
		t.Fatalf("history holds %d events, counts %d to %d; want the newest %d", len(got), got[0].Count, got[len(got)-1].Count, kept)
	}
}
