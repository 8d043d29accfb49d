package tui

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fence-dev/fence/pkg/history"

	"github.com/fence-dev/fence/pkg/coord"
)

// fakeCoord stands for a coordinator's feed in the unit and golden tests:
// a list, a history, and watches the test sends events into. The real
// backends are driven in local_test.go.
type fakeCoord struct {
	coord.Coordinator // nil: the operations the dashboard does not use
	mu                sync.Mutex
	desc              string
	locks             map[string]coord.LockInfo
	history           map[string][]history.Event
	watches           []chan coord.Event
	lists             int
	listErr           error
	listGate          chan struct{} // when set, a list or an inspect waits until it is closed (a frozen etcd)
	watchErr          error
	revoked           []string
	inspects          int
	limits            []coord.Limit
}

var errFake = errors.New("not supported by the fake")

func newFake(infos ...coord.LockInfo) *fakeCoord {
	f := &fakeCoord{desc: "fake /run/fence", locks: map[string]coord.LockInfo{}, history: map[string][]history.Event{}}
	for _, i := range infos {
		f.locks[i.Name] = i
	}
	return f
}

func (f *fakeCoord) Acquire(context.Context, string, coord.AcquireOptions) (*coord.Lease, error) {
	return nil, errFake
}
func (f *fakeCoord) Renew(context.Context, string, string) (coord.Renewal, error) {
	return coord.Renewal{}, errFake
}
func (f *fakeCoord) Release(context.Context, string, string) error { return errFake }
func (f *fakeCoord) Close() error                                  { return nil }
func (f *fakeCoord) Describe() string                              { return f.desc }

func (f *fakeCoord) Revoke(_ context.Context, name string) (coord.LockInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	i, ok := f.locks[name]
	if !ok || !i.Held {
		return coord.LockInfo{}, coord.ErrNotHeld
	}
	f.revoked = append(f.revoked, name)
	f.locks[name] = coord.LockInfo{Name: name, LastToken: i.Token}
	return i, nil
}

func (f *fakeCoord) Inspect(ctx context.Context, name string) (coord.LockInfo, error) {
	f.mu.Lock()
	gate := f.listGate
	f.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return coord.LockInfo{}, ctx.Err()
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.inspects++
	if i, ok := f.locks[name]; ok {
		return i, nil
	}
	return coord.LockInfo{Name: name}, nil
}

func (f *fakeCoord) List(ctx context.Context, prefix string) ([]coord.LockInfo, error) {
	f.mu.Lock()
	gate := f.listGate
	f.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lists++
	if f.listErr != nil {
		return nil, f.listErr
	}
	var out []coord.LockInfo
	for _, i := range f.locks {
		if strings.HasPrefix(i.Name, prefix) {
			out = append(out, i)
		}
	}
	slices.SortFunc(out, func(a, b coord.LockInfo) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

func (f *fakeCoord) Watch(ctx context.Context, prefix string) (<-chan coord.Event, error) {
	f.mu.Lock()
	if f.watchErr != nil {
		err := f.watchErr
		f.mu.Unlock()
		return nil, err
	}
	in := make(chan coord.Event, 1024)
	f.watches = append(f.watches, in)
	f.mu.Unlock()
	out := make(chan coord.Event)
	go func() {
		defer close(out)
		for {
			select {
			case <-ctx.Done():
				return
			case ev, ok := <-in:
				if !ok {
					return
				}
				select {
				case out <- ev:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return out, nil
}

func (f *fakeCoord) Record(_ context.Context, ev history.Event) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.history[ev.Lock] = append(f.history[ev.Lock], ev)
	return nil
}

func (f *fakeCoord) History(_ context.Context, lock string, limit int) ([]history.Event, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	h := f.history[lock]
	if limit > 0 && len(h) > limit {
		h = h[len(h)-limit:]
	}
	return slices.Clone(h), nil
}

func (f *fakeCoord) Append(ctx context.Context, evs []history.Event) error {
	for _, ev := range evs {
		_ = f.Record(ctx, ev)
	}
	return nil
}

// Since and Heads number a lock's events from 1 (the fake never trims).
func (f *fakeCoord) Since(_ context.Context, lock string, after uint64) ([]history.Entry, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []history.Entry
	for i, ev := range f.history[lock] {
		if seq := uint64(i + 1); seq > after {
			out = append(out, history.Entry{Seq: seq, Event: ev})
		}
	}
	return out, nil
}

func (f *fakeCoord) Heads(context.Context) ([]history.Head, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []history.Head
	for _, lock := range slices.Sorted(maps.Keys(f.history)) {
		out = append(out, history.Head{Lock: lock, Seq: uint64(len(f.history[lock]))})
	}
	return out, nil
}

// set changes a lock and sends the event to the current watch.
func (f *fakeCoord) set(typ coord.EventType, info coord.LockInfo) {
	f.mu.Lock()
	f.locks[info.Name] = info
	w := f.watches[len(f.watches)-1]
	f.mu.Unlock()
	w <- coord.Event{Type: typ, Info: info}
}

// send sends an event to the current watch without changing the locks.
func (f *fakeCoord) send(ev coord.Event) {
	f.mu.Lock()
	w := f.watches[len(f.watches)-1]
	f.mu.Unlock()
	w <- ev
}

// endWatch closes the current watch, as a lost connection would.
func (f *fakeCoord) endWatch() {
	f.mu.Lock()
	defer f.mu.Unlock()
	close(f.watches[len(f.watches)-1])
}

func (f *fakeCoord) counts() (lists, watches, inspects int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lists, len(f.watches), f.inspects
}

// noHistory hides the fake's Historian.
type noHistory struct{ coord.Coordinator }

// epoch is the fixed clock of the tests.
var epoch = time.Date(2026, 3, 14, 15, 9, 26, 0, time.UTC)

func fixedClock() time.Time { return epoch }

// held is a held lock acquired ago before epoch with left of ttl to go.
func held(name, holder string, token uint64, ttl, left, ago time.Duration) coord.LockInfo {
	return coord.LockInfo{
		Name: name, Held: true, Holder: holder, Token: token, LastToken: token,
		LeaseID: "lease-" + name, TTL: ttl, TTLLeft: left, AcquiredAt: epoch.Add(-ago),
	}
}

func free(name string, last uint64) coord.LockInfo {
	return coord.LockInfo{Name: name, LastToken: last}
}

// sampleLocks is a small, varied set of locks.
func sampleLocks() []coord.LockInfo {
	return []coord.LockInfo{
		held("billing/reconcile", "batch-7:4121", 812, 15*time.Second, 14*time.Second, 3*time.Minute+5*time.Second),
		held("deploy/prod", "ci-runner-3:88", 57, 30*time.Second, 6*time.Second, 42*time.Second),
		free("migrations", 9),
		held("reports/daily", "cron:1999", 4, time.Minute, 45*time.Second, 2*time.Hour+7*time.Minute),
		held("search/reindex", "worker-1:311", 1200345, 15*time.Second, 11*time.Second, 9*time.Second),
		free("cache/warm", 0),
	}
}

func sampleHistory(f *fakeCoord) {
	t := epoch.Add(-10 * time.Minute)
	add := func(ev history.Event) {
		t = t.Add(30 * time.Second)
		ev.Time = t
		f.history[ev.Lock] = append(f.history[ev.Lock], ev)
	}
	add(history.Event{Lock: "deploy/prod", Kind: history.Acquired, Token: 55, Holder: "ci-runner-1:12", Wait: 1200 * time.Millisecond})
	add(history.Event{Lock: "deploy/prod", Kind: history.RenewalFailed, Token: 55, Holder: "ci-runner-1:12", Count: 3, Error: "context deadline exceeded"})
	add(history.Event{Lock: "deploy/prod", Kind: history.LeaseLost, Token: 55, Holder: "ci-runner-1:12"})
	add(history.Event{Lock: "deploy/prod", Kind: history.Expired, Token: 55, Holder: "ci-runner-1:12"})
	add(history.Event{Lock: "deploy/prod", Kind: history.Acquired, Token: 56, Holder: "ci-runner-2:40"})
	add(history.Event{Lock: "deploy/prod", Kind: history.StaleRefused, Key: "release/current", Token: 55, AcceptedToken: 56})
	add(history.Event{Lock: "deploy/prod", Kind: history.Released, Token: 56, Holder: "ci-runner-2:40", HeldFor: 95 * time.Second})
	add(history.Event{Lock: "deploy/prod", Kind: history.Acquired, Token: 57, Holder: "ci-runner-3:88", Wait: 300 * time.Millisecond})
	add(history.Event{Lock: "deploy/prod", Kind: history.RenewalFailed, Token: 57, Holder: "ci-runner-3:88", Count: 1, Error: "etcdserver: request timed out"})
	add(history.Event{Lock: "billing/reconcile", Kind: history.Acquired, Token: 812, Holder: "batch-7:4121"})
	add(history.Event{Lock: "migrations", Kind: history.Revoked, Token: 9, Holder: "dba:77"})
	add(history.Event{Lock: "reports/daily", Kind: history.DeadlineExceeded, Token: 3, Holder: "cron:1888"})
}

// SetLimit, ClearLimit and Limits give the fake limits: a change
// sets the Limit of every lock it covers and sends EventLimit for each, as
// the backends' watches do.
func (f *fakeCoord) SetLimit(_ context.Context, l coord.Limit) error {
	f.mu.Lock()
	f.limits = slices.DeleteFunc(f.limits, func(o coord.Limit) bool { return o.Name == l.Name && o.Prefix == l.Prefix })
	f.limits = append(f.limits, l)
	f.mu.Unlock()
	f.relimit()
	return nil
}

func (f *fakeCoord) ClearLimit(_ context.Context, name string, prefix bool) (coord.Limit, bool, error) {
	f.mu.Lock()
	i := slices.IndexFunc(f.limits, func(o coord.Limit) bool { return o.Name == name && o.Prefix == prefix })
	if i < 0 {
		f.mu.Unlock()
		return coord.Limit{}, false, nil
	}
	old := f.limits[i]
	f.limits = slices.Delete(f.limits, i, i+1)
	f.mu.Unlock()
	f.relimit()
	return old, true, nil
}

func (f *fakeCoord) Limits(context.Context) ([]coord.Limit, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.limits), nil
}

func (f *fakeCoord) relimit() {
	f.mu.Lock()
	var evs []coord.Event
	for name, i := range f.locks {
		nl := effectiveLimit(f.limits, name)
		if (nl == nil) != (i.Limit == nil) || nl != nil && *nl != *i.Limit {
			i.Limit = nl
			f.locks[name] = i
			evs = append(evs, coord.Event{Type: coord.EventLimit, Info: i})
		}
	}
	var w chan coord.Event
	if len(f.watches) > 0 {
		w = f.watches[len(f.watches)-1]
	}
	f.mu.Unlock()
	for _, ev := range evs {
		if w != nil {
			w <- ev
		}
	}
}

// effectiveLimit is the limit that binds lock name among ls, as the
// backends choose it: the smallest Max of those that cover it (the lock's
// own first, then the longest prefix, on a tie).
func effectiveLimit(ls []coord.Limit, name string) *coord.Limit {
	var best *coord.Limit
	for i := range ls {
		l := ls[i]
		if l.Prefix && !strings.HasPrefix(name, l.Name) || !l.Prefix && l.Name != name {
			continue
		}
		if best == nil || l.Max < best.Max || l.Max == best.Max && (best.Prefix && !l.Prefix || l.Prefix == best.Prefix && len(l.Name) > len(best.Name)) {
			best = &l
		}
	}
	return best
}
