package local

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/fence-dev/fence/internal/proc"
	"github.com/fence-dev/fence/pkg/clock"
	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/internal/coordkit"
)

// fallbackPoll is how often subscribers look again when inotify cannot be
// had.
const fallbackPoll = 200 * time.Millisecond

// hub turns inotify events into wake-ups of subscribers. One hub (one
// inotify instance) serves every coordinator of this process on one state
// directory; it is started by the first that needs it and stopped when the
// last of them is closed. Each subscription follows one file, or every
// state file and limits.json (a Watch), and names the inotify watches it
// needs, which subscribers share and which go with their last subscriber:
//
//   - the locks/ directory, for a waiter (its lock's state file is
//     replaced, or its lease record overwritten) and a Watch; a Watch also
//     needs the state directory, where the replacement of limits.json
//     (fence limit, freeze, thaw) is seen (limitsBase);
//   - a lock's lock file, its own inotify watch, which Revoke and
//     RequestStop write to (see stop.go) and the holder's lease watch
//     follows: no other change of the directory wakes it.
//
// Once a watch could not be had (no inotify, or the per-user limit of
// watches is reached) the hub polls: its loop wakes every subscriber every
// fallbackPoll as if events had been lost, and each looks at everything
// again.
type hub struct {
	dir  string            // the locks/ directory
	w    *fsnotify.Watcher // nil: no inotify, every subscriber polls
	refs int               // guarded by hubs

	mu      sync.Mutex
	subs    map[*subscription]struct{}
	watches map[string]int // inotify watches by path: their subscribers
	polling bool           // a watch could not be had
	tick    *time.Ticker   // runs once polling

	stop chan struct{} // closed by the last release
	done chan struct{} // closed when run has returned
}

// newWatcher makes an inotify instance (a variable for tests).
var newWatcher = fsnotify.NewWatcher

var hubs = struct {
	sync.Mutex
	m map[string]*hub
}{m: map[string]*hub{}}

func acquireHub(dir string) *hub {
	hubs.Lock()
	defer hubs.Unlock()
	if h := hubs.m[dir]; h != nil {
		h.refs++
		return h
	}
	h := &hub{dir: dir, refs: 1, subs: map[*subscription]struct{}{}, watches: map[string]int{},
		tick: time.NewTicker(fallbackPoll), stop: make(chan struct{}), done: make(chan struct{})}
	h.tick.Stop()
	h.w, _ = newWatcher()
	go h.run()
	hubs.m[dir] = h
	return h
}

func (h *hub) release() {
	hubs.Lock()
	h.refs--
	last := h.refs == 0
	if last {
		delete(hubs.m, h.dir)
	}
	hubs.Unlock()
	if last {
		close(h.stop)
		<-h.done
		if h.w != nil {
			h.w.Close()
		}
	}
}

// run wakes the subscribers of each inotify event, and every subscriber
// when events were lost (overflow, or worse) and at every tick.
func (h *hub) run() {
	defer close(h.done)
	var (
		events <-chan fsnotify.Event
		errs   <-chan error
	)
	if h.w != nil {
		events, errs = h.w.Events, h.w.Errors
	}
	for {
		select {
		case ev := <-events:
			base, changed := "", ev.Name == filepath.Join(filepath.Dir(h.dir), "limits.json")
			if changed {
				base = limitsBase
			} else if filepath.Dir(ev.Name) == h.dir {
				base, changed = stateFileBase(filepath.Base(ev.Name))
			}
			h.notify(func(s *subscription) bool {
				if s.path == "" && changed {
					s.dirty[base] = struct{}{}
				}
				return s.path == ev.Name || s.path == "" && changed
			})
		case <-errs:
			h.notify(eventsLost)
		case <-h.tick.C:
			h.notify(eventsLost)
		case <-h.stop:
			return
		}
	}
}

// limitsBase is the base a Watch's subscription is notified with when
// limits.json changed: no state file has it (bases are escapes of names,
// which never hold a NUL).
const limitsBase = "\x00limits"

// eventsLost tells s that events were lost: it looks at everything again.
func eventsLost(s *subscription) bool {
	s.all = true
	return true
}

// notify wakes the subscribers for which wake, called under h.mu, returns
// true.
func (h *hub) notify(wake func(s *subscription) bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for s := range h.subs {
		if wake(s) {
			s.poke()
		}
	}
}

// subscription receives a wake-up (coalesced) on c after changes to the
// file at path (to every state file and limits.json when path is "": take
// says which).
type subscription struct {
	h       *hub
	path    string
	watches []string // the inotify watches it holds
	c       chan struct{}

	dirty map[string]struct{} // guarded by h.mu
	all   bool                // events may have been lost; guarded by h.mu
}

func (s *subscription) poke() {
	select {
	case s.c <- struct{}{}:
	default:
	}
}

// subscribe subscribes to the changes of the file at path (of every state
// file and limits.json when path is ""), seen by the inotify watches of
// the paths watch.
func (h *hub) subscribe(path string, watch ...string) *subscription {
	s := &subscription{h: h, path: path, c: make(chan struct{}, 1), dirty: map[string]struct{}{}}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, p := range watch {
		if h.watches[p] == 0 && (h.w == nil || h.w.Add(p) != nil) {
			if !h.polling {
				h.polling = true
				h.tick.Reset(fallbackPoll)
			}
			continue
		}
		h.watches[p]++
		s.watches = append(s.watches, p)
	}
	h.subs[s] = struct{}{}
	return s
}

func (s *subscription) close() {
	h := s.h
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.subs, s)
	for _, p := range s.watches {
		if h.watches[p]--; h.watches[p] == 0 {
			delete(h.watches, p)
			_ = h.w.Remove(p) // already gone when the file was removed
		}
	}
}

// take returns and clears what changed since the last take.
func (s *subscription) take() (bases []string, all bool) {
	s.h.mu.Lock()
	defer s.h.mu.Unlock()
	for b := range s.dirty {
		bases = append(bases, b)
	}
	clear(s.dirty)
	all, s.all = s.all, false
	return bases, all
}

// sleep waits for one wake-up: a change notified on sub (changed), the
// exit of one of deps, or wake passing (when >= 0). It returns ctx's error
// when ctx ends first, and errClosed when the coordinator is closed.
func (c *coordinator) sleep(ctx context.Context, sub *subscription, deps []proc.ID, wake time.Duration) (changed bool, err error) {
	var wg sync.WaitGroup
	defer wg.Wait() // after cancel: the wait for deps ends with nap
	nap, cancel := context.WithCancel(ctx)
	defer cancel()
	if wake >= 0 {
		defer time.AfterFunc(wake, cancel).Stop()
	}
	if len(deps) > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := proc.WaitAny(nap, deps...); err == nil {
				cancel()
			}
		}()
	}
	select {
	case <-sub.c:
		return true, nil
	case <-nap.Done():
		return false, ctx.Err() // nil: a time passed or a process exited
	case <-c.life.Done():
		return false, errClosed
	}
}

// untilWake converts a boot-clock instant into a timer duration (-1: none).
func untilWake(b clock.Boot) time.Duration {
	if b == 0 {
		return -1
	}
	return max(b.Sub(clock.Now())+time.Millisecond, time.Millisecond)
}

// Watch sends an Event with the lock's state after each change of a lock
// under prefix: a new holder (acquired), a renewal (renewed), the end of a
// lease by release, revoke, expiry or the death of its processes
// (released), a change in the queue (waiters), and a change of the
// operator limit that binds the lock (limit: fence limit, freeze, thaw;
// also for a lock with a limit of its own and no state yet, as List shows
// it). Every event's Info carries the lock's limit. The queue is as of the
// last change of the state file. The channel is closed when ctx ends or the
// coordinator is closed; a consumer that does not read holds up only its
// own Watch.
func (c *coordinator) Watch(ctx context.Context, prefix string) (<-chan coord.Event, error) {
	if err := c.ready(ctx); err != nil {
		return nil, err
	}
	self, err := selfID()
	if err != nil {
		return nil, err
	}
	w := &watcher{c: c, prefix: prefix, self: self, views: map[string]view{}}
	if w.sub, err = c.subscribe("", c.locksDir, c.dir); err != nil {
		return nil, err
	}
	// The first scan, after subscribing, is the baseline: no events.
	fs, err := c.listLocks(stateSuffix, prefix)
	if err != nil {
		w.sub.close()
		return nil, err
	}
	w.scan(w.withLimits(fs), nil) // an unreadable limits file: none known until it reads
	ch := make(chan coord.Event, 16)
	go w.run(ctx, ch)
	return ch, nil
}

type watcher struct {
	c      *coordinator
	prefix string
	self   proc.ID
	sub    *subscription
	views  map[string]view // by file base
	// limits is limits.json as last read; every event carries the lock's
	// effective limit from it.
	limits []coord.Limit
}

// view is what a watcher last saw of one lock.
type view struct {
	info    coord.LockInfo
	expires clock.Boot // the live holder's expiry
	until   clock.Boot
	waitOn  []proc.ID
}

func (w *watcher) run(ctx context.Context, ch chan<- coord.Event) {
	defer close(ch)
	defer w.sub.close()
	emit := func(ev coord.Event) bool {
		select {
		case ch <- ev:
			return true
		case <-ctx.Done():
		case <-w.c.life.Done():
		}
		return false
	}
	for {
		deps, next := w.followed()
		changed, err := w.c.sleep(ctx, w.sub, deps, untilWake(next))
		if err != nil || !w.scan(w.toScan(changed), emit) {
			return
		}
	}
}

// followed returns what the watcher follows besides the state files: the
// processes whose exit may change a verdict, and the earliest time at which
// one changes (0: none).
func (w *watcher) followed() (deps []proc.ID, next clock.Boot) {
	for _, v := range w.views {
		deps = append(deps, v.waitOn...)
		if v.until != 0 && (next == 0 || v.until < next) {
			next = v.until
		}
	}
	return deps, next
}

// toScan returns the locks to read again after a wake-up: after a change,
// the changed ones (and, when limits.json changed, the limits with the
// locks withLimits adds), or every lock (and the limits) when events were
// lost or the hub polls; the known ones when a time passed or a
// process exited.
func (w *watcher) toScan(changed bool) []lockFiles {
	if !changed {
		return w.known()
	}
	bases, all := w.sub.take()
	var fs []lockFiles
	limits := false
	for _, b := range bases {
		if b == limitsBase {
			limits = true
		} else if f, ok := w.c.filesForBase(b, w.prefix); ok {
			fs = append(fs, f)
		}
	}
	if all {
		fs, _ = w.c.listLocks(stateSuffix, w.prefix)
		fs, limits = append(fs, w.known()...), true
	}
	if limits {
		return w.withLimits(fs)
	}
	return fs
}

// known returns the files of every lock the watcher knows.
func (w *watcher) known() []lockFiles {
	var fs []lockFiles
	for _, v := range w.views {
		fs = append(fs, w.c.files(v.info.Name))
	}
	return fs
}

// withLimits reads limits.json again and, when it changed, adds to fs every
// lock the watcher knows (its effective limit may have changed) and each
// lock under the prefix with a limit of its own, before or after, which may
// have no state file (as List shows it). A file that cannot be read keeps
// the limits last read (a grant fails closed on it meanwhile).
func (w *watcher) withLimits(fs []lockFiles) []lockFiles {
	ls, err := w.c.readLimits()
	if err != nil || slices.Equal(ls, w.limits) {
		return fs
	}
	fs = append(fs, w.known()...)
	for _, l := range slices.Concat(w.limits, ls) {
		if !l.Prefix && strings.HasPrefix(l.Name, w.prefix) {
			fs = append(fs, w.c.files(l.Name))
		}
	}
	w.limits = ls
	return fs
}

// sameLimit reports whether a and b are the same limit (or both none).
func sameLimit(a, b *coord.Limit) bool {
	return a == nil && b == nil || a != nil && b != nil && *a == *b
}

// scan reads the locks of fs and emits an event for each change (emit nil:
// just record): EventLimit first when the lock's effective limit changed.
// It returns false when emit gave up.
func (w *watcher) scan(fs []lockFiles, emit func(coord.Event) bool) bool {
	seen := map[string]bool{}
	for _, f := range fs {
		if seen[f.base] {
			continue
		}
		seen[f.base] = true
		nv, ok := w.read(f)
		if !ok {
			continue
		}
		old := w.views[f.base]
		w.views[f.base] = nv
		if emit == nil {
			continue
		}
		if !sameLimit(old.info.Limit, nv.info.Limit) && !emit(coord.Event{Type: coord.EventLimit, Info: nv.info}) {
			return false
		}
		if typ, ok := change(old, nv); ok && !emit(coord.Event{Type: typ, Info: nv.info}) {
			return false
		}
		if !nv.info.Held && nv.info.Waiters == 0 && nv.info.LastToken == 0 && nv.info.Limit == nil {
			delete(w.views, f.base)
		}
	}
	return true
}

// read reads and judges the lock of f; ok is false for one outside the
// prefix, and for a state that cannot be trusted (nothing to report).
func (w *watcher) read(f lockFiles) (view, bool) {
	li, lw, err := w.c.inspectFiles(f, w.self)
	if err != nil {
		return view{}, false
	}
	if old, had := w.views[f.base]; li.Name == "" && had { // a hashed state file was removed
		li.Name = old.info.Name
	}
	if !strings.HasPrefix(li.Name, w.prefix) || li.Name == "" {
		return view{}, false
	}
	// What to follow only while it has a holder or waiters.
	nv := view{info: li, until: lw.v.until, waitOn: lw.v.waitOn}
	nv.info.Limit = coordkit.EffectiveLimit(w.limits, li.Name)
	for _, h := range lw.live {
		nv.expires = max(nv.expires, h.ExpiresAt)
	}
	if !li.Held && li.Waiters == 0 {
		nv.until, nv.waitOn = 0, nil
	}
	return nv, true
}

// change says which event, if any, turns old into nu.
func change(old, nu view) (coord.EventType, bool) {
	o, n := old.info, nu.info
	switch {
	case n.Held && (!o.Held || o.LeaseID != n.LeaseID):
		return coord.EventAcquired, true
	case o.Held && !n.Held:
		return coord.EventReleased, true
	case len(n.Holders) > len(o.Holders):
		return coord.EventAcquired, true // another holder of a semaphore
	case len(n.Holders) < len(o.Holders):
		return coord.EventReleased, true
	case !o.Held && !n.Held && n.LastToken != o.LastToken:
		// A whole hold began and ended between two scans (an acquire and
		// release at once): it is reported as its end, or a consumer that
		// reacts to holds (fence shards' members to the settings lock)
		// would never learn of it.
		return coord.EventReleased, true
	case o.Held && n.Held && old.expires != nu.expires:
		return coord.EventRenewed, true
	case o.Waiters != n.Waiters || !slices.Equal(o.Queue, n.Queue):
		return coord.EventWaiters, true
	}
	return "", false
}
