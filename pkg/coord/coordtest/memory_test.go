package coordtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/internal/coordkit"
)

// TestSuiteOnMemory runs the suite against mem, a small in-memory reference
// coordinator, to show that a correct backend passes it (the real backends
// run it in pkg/coord's TestConformance). TestSuiteCatches shows that it
// fails broken ones.
func TestSuiteOnMemory(t *testing.T) {
	st := newMemState(os.Getenv(memBugEnv))
	Run(t, Harness{
		New:      func(testing.TB) coord.Coordinator { return &memClient{st: st} },
		ShortTTL: 200 * time.Millisecond,
	})
}

// memState is the shared state of an in-memory coordinator; bug, when set,
// breaks it on purpose.
type memState struct {
	bug     string
	mu      sync.Mutex
	locks   map[string]*memLock
	leaseID int
	owners  map[string]string // lease id -> its lock
	changed chan struct{}     // closed on every change
	watches map[chan coord.Event]string
}

type memLock struct {
	holder *memLease
	last   uint64
	queue  []*memTicket // FIFO
	// A semaphore's slots, and its holders besides holder (the oldest).
	slots  int
	others []*memLease
}

// memTicket is a waiter's place.
type memTicket struct {
	holder string
	since  time.Time
}

// all returns the lock's holders, oldest first.
func (l *memLock) all() []*memLease {
	if l.holder == nil {
		return nil
	}
	return append([]*memLease{l.holder}, l.others...)
}

// drop removes h from the holders.
func (l *memLock) drop(h *memLease) {
	hs := slices.DeleteFunc(l.all(), func(o *memLease) bool { return o == h })
	l.holder, l.others = nil, nil
	if len(hs) > 0 {
		l.holder, l.others = hs[0], hs[1:]
	}
}

// freeSlot is the lowest slot no holder has.
func (l *memLock) freeSlot(bug string) int {
	if bug == "slot-not-lowest" {
		return len(l.all())
	}
	for s := 0; ; s++ {
		if !slices.ContainsFunc(l.all(), func(h *memLease) bool { return h.slot == s }) {
			return s
		}
	}
}

type memLease struct {
	id, holder     string
	token          uint64
	ttl            time.Duration
	expires        time.Time
	acquiredAtWall time.Time
	slot           int
}

func newMemState(bug string) *memState {
	return &memState{bug: bug, locks: map[string]*memLock{}, owners: map[string]string{}, changed: make(chan struct{}), watches: map[chan coord.Event]string{}}
}

// checkID refuses a lease id mem cannot have issued (a positive decimal
// number) and one of another lock, as ErrInvalid. Called with s.mu held.
func (s *memState) checkID(name, id string) error {
	if s.bug != "lease-id-unchecked" {
		if id == "" || strings.Trim(id, "0123456789") != "" || id[0] == '0' || len(id) > 18 {
			return fmt.Errorf("%w: lease id %q", coord.ErrInvalid, id)
		}
	}
	if lock, ok := s.owners[id]; ok && lock != name && s.bug != "lease-any-lock" {
		return fmt.Errorf("%w: lease %s belongs to lock %q", coord.ErrInvalid, id, lock)
	}
	return nil
}

// memBugEnv names the bug TestSuiteOnMemory plants, for TestSuiteCatches.
const memBugEnv = "FENCE_COORDTEST_MEMBUG"

func init() {
	if os.Getenv(memBugEnv) != "" {
		guard = 5 * time.Second // a planted bug may show as a hang
	}
}

// TestSuiteCatches runs the suite, in a child process, against in-memory
// coordinators with one bug each, and checks that the case meant to catch
// the bug fails.
func TestSuiteCatches(t *testing.T) {
	if os.Getenv(memBugEnv) != "" {
		t.Skip("inside a child")
	}
	for _, c := range []struct{ bug, test string }{
		{"no-exclusion", "MutualExclusion"},
		{"lifo", "FIFO"},
		{"token-reuse", "TokensAcrossRestart"},
		{"early-expiry", "ExpiryTakeover"},
		{"early-expiry", "ExpiryFree"},
		{"cancel-leaves-ticket", "CancelWhileWaiting"},
		{"release-any", "ReleaseIdempotent"},
		{"lease-any-lock", "ReleaseIdempotent"},
		{"lease-id-unchecked", "BadLeaseID"},
		{"no-validation", "BadInput"},
		{"options-unchecked", "BadInput"},
		{"options-unchecked", "ZeroOptions"},
		{"sent-late", "Inspect"},
		{"no-queue", "Queue"},
		{"slots-over", "Slots"},
		{"slot-not-lowest", "Slots"},
		{"slots-mixed", "SlotsMixed"},
		{"lifo", "SlotsBurst"},
	} {
		t.Run(c.bug+"/"+c.test, func(t *testing.T) {
			t.Parallel()
			exe, err := os.Executable()
			if err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(exe, "-test.run=^TestSuiteOnMemory$/^"+c.test+"$", "-test.v")
			cmd.Env = append(os.Environ(), memBugEnv+"="+c.bug)
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("the suite passed a coordinator with bug %q:\n%s", c.bug, out)
			}
			if !strings.Contains(string(out), "--- FAIL: TestSuiteOnMemory/"+c.test+" ") {
				t.Fatalf("bug %q: %s did not fail:\n%s", c.bug, c.test, out)
			}
		})
	}
}

// lock returns name's lock with its expired holder dropped; mu is held.
func (s *memState) lock(name string) *memLock {
	l := s.locks[name]
	if l == nil {
		l = &memLock{}
		s.locks[name] = l
	}
	for _, h := range l.all() {
		if !time.Now().Before(h.expires) {
			l.drop(h)
			s.change(name, coord.EventReleased)
		}
	}
	return l
}

func (s *memState) info(name string, l *memLock) coord.LockInfo {
	i := coord.LockInfo{Name: name, LastToken: l.last, Waiters: len(l.queue)}
	if s.bug != "no-queue" {
		for _, t := range l.queue {
			i.Queue = append(i.Queue, coord.Waiter{Holder: t.holder, Since: t.since})
		}
	}
	var hs []coord.HolderInfo
	for _, h := range l.all() {
		hs = append(hs, coord.HolderInfo{Slot: h.slot, Holder: h.holder, Token: h.token, LeaseID: h.id, TTL: h.ttl,
			TTLLeft: time.Until(h.expires), AcquiredAt: h.acquiredAtWall})
	}
	coordkit.SetHolders(&i, l.slots, hs)
	return i
}

// change wakes waiters and tells watchers; mu is held.
func (s *memState) change(name string, typ coord.EventType) {
	close(s.changed)
	s.changed = make(chan struct{})
	for ch, prefix := range s.watches {
		if strings.HasPrefix(name, prefix) {
			select {
			case ch <- coord.Event{Type: typ, Info: s.info(name, s.locks[name])}:
			default:
			}
		}
	}
}

type memClient struct{ st *memState }

func (c *memClient) Acquire(ctx context.Context, name string, o coord.AcquireOptions) (*coord.Lease, error) {
	switch c.st.bug {
	case "no-validation", "options-unchecked":
		// As backends checked before coordkit.CheckAcquire: the name (unless
		// no-validation) and a positive TTL, nothing else.
		if err := coord.ValidateName(name); err != nil && c.st.bug != "no-validation" {
			return nil, err
		}
		if c.st.bug == "no-validation" && o.TTL == 0 {
			o.TTL = defaultTTL
		}
		if err := coord.ValidateTTL(o.TTL); err != nil {
			return nil, err
		}
		if o.Holder == "" {
			o.Holder = coord.DefaultHolder()
		}
	default:
		var err error
		if o, err = coordkit.CheckAcquire(name, o); err != nil {
			return nil, err
		}
	}
	s := c.st
	sent := time.Now()
	var deadline <-chan time.Time
	if o.Wait >= 0 {
		tm := time.NewTimer(o.Wait)
		defer tm.Stop()
		deadline = tm.C
	}
	ticket := &memTicket{holder: o.Holder, since: time.Now()}
	s.mu.Lock()
	l := s.lock(name)
	want := coordkit.SlotsOf(o.Slots)
	if have := coordkit.SlotsOf(l.slots); have != want && s.bug != "slots-mixed" {
		if l.holder != nil || len(l.queue) > 0 {
			s.mu.Unlock()
			return nil, &coordkit.SlotsError{Lock: name, Have: have, Want: want}
		}
	}
	if l.holder == nil && len(l.queue) == 0 {
		l.slots = 0
		if want > 1 {
			l.slots = want
		}
	}
	capacity := coordkit.SlotsOf(l.slots)
	if s.bug == "slots-over" && capacity > 1 {
		capacity++
	}
	l.queue = append(l.queue, ticket)
	if l.holder != nil {
		s.change(name, coord.EventWaiters)
	}
	leave := func() {
		l.queue = slicesDelete(l.queue, ticket)
		s.change(name, coord.EventWaiters)
	}
	notified := false
	for {
		l = s.lock(name)
		head := l.queue[0] == ticket
		if s.bug == "lifo" {
			head = l.queue[len(l.queue)-1] == ticket
		}
		if (len(l.all()) < capacity || s.bug == "no-exclusion") && head {
			l.queue = slicesDelete(l.queue, ticket)
			l.last++
			if s.bug == "token-reuse" && l.last > 1 {
				l.last--
			}
			s.leaseID++
			s.owners[fmt.Sprint(s.leaseID)] = name
			now := time.Now()
			h := &memLease{id: fmt.Sprint(s.leaseID), holder: o.Holder, token: l.last, ttl: o.TTL, expires: sent.Add(o.TTL), acquiredAtWall: now,
				slot: l.freeSlot(s.bug)}
			if s.bug == "early-expiry" {
				h.expires = sent.Add(o.TTL / 2)
			}
			if s.bug == "sent-late" {
				sent = time.Now().Add(time.Millisecond)
			}
			if l.holder == nil || s.bug == "no-exclusion" {
				l.holder = h
			} else {
				l.others = append(l.others, h)
			}
			s.change(name, coord.EventAcquired)
			s.mu.Unlock()
			return &coord.Lease{Name: name, Holder: h.holder, Token: h.token, ID: h.id, TTL: h.ttl, AcquiredAt: now, Sent: sent, Slot: h.slot}, nil
		}
		if o.Wait == 0 {
			leave()
			s.mu.Unlock()
			return nil, coord.ErrBusy
		}
		if !notified && l.holder != nil && o.OnWait != nil {
			notified = true
			info := s.info(name, l)
			s.mu.Unlock()
			o.OnWait(info)
			s.mu.Lock()
			continue
		}
		var expiry <-chan time.Time
		if hs := l.all(); len(hs) > 0 {
			first := slices.MinFunc(hs, func(a, b *memLease) int { return a.expires.Compare(b.expires) })
			tm := time.NewTimer(time.Until(first.expires))
			defer tm.Stop()
			expiry = tm.C
		}
		changed := s.changed
		s.mu.Unlock()
		select {
		case <-changed:
		case <-expiry:
		case <-deadline:
			s.mu.Lock()
			leave()
			s.mu.Unlock()
			return nil, coord.ErrBusy
		case <-ctx.Done():
			s.mu.Lock()
			if s.bug != "cancel-leaves-ticket" {
				leave()
			}
			s.mu.Unlock()
			return nil, ctx.Err()
		}
		s.mu.Lock()
	}
}

func slicesDelete(q []*memTicket, t *memTicket) []*memTicket {
	for i, x := range q {
		if x == t {
			return append(q[:i:i], q[i+1:]...)
		}
	}
	return q
}

func (c *memClient) Renew(ctx context.Context, name, id string) (coord.Renewal, error) {
	if err := coord.ValidateName(name); err != nil {
		return coord.Renewal{}, err
	}
	s := c.st
	sent := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.checkID(name, id); err != nil {
		return coord.Renewal{}, err
	}
	l := s.lock(name)
	for _, h := range l.all() {
		if h.id == id {
			h.expires = sent.Add(h.ttl)
			return coord.Renewal{Sent: sent, TTL: h.ttl}, nil
		}
	}
	return coord.Renewal{}, coord.ErrLeaseLost
}

func (c *memClient) Release(ctx context.Context, name, id string) error {
	if err := coord.ValidateName(name); err != nil {
		return err
	}
	s := c.st
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.checkID(name, id); err != nil {
		return err
	}
	l := s.lock(name)
	for _, h := range l.all() {
		if h.id == id || s.bug == "release-any" {
			l.drop(h)
			s.change(name, coord.EventReleased)
			break
		}
	}
	return nil
}

func (c *memClient) Revoke(ctx context.Context, name string) (coord.LockInfo, error) {
	if err := coord.ValidateName(name); err != nil {
		return coord.LockInfo{}, err
	}
	s := c.st
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.lock(name)
	if l.holder == nil {
		return coord.LockInfo{}, coord.ErrNotHeld
	}
	i := s.info(name, l)
	if len(l.all()) > 1 {
		return i, coordkit.ManyHolders(i)
	}
	l.holder = nil
	s.change(name, coord.EventReleased)
	return i, nil
}

func (c *memClient) Inspect(ctx context.Context, name string) (coord.LockInfo, error) {
	if err := coord.ValidateName(name); err != nil {
		return coord.LockInfo{}, err
	}
	c.st.mu.Lock()
	defer c.st.mu.Unlock()
	return c.st.info(name, c.st.lock(name)), nil
}

func (c *memClient) List(ctx context.Context, prefix string) ([]coord.LockInfo, error) {
	s := c.st
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []coord.LockInfo
	for name := range s.locks {
		if strings.HasPrefix(name, prefix) {
			if l := s.lock(name); l.holder != nil || l.last > 0 {
				out = append(out, s.info(name, l))
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func (c *memClient) Watch(ctx context.Context, prefix string) (<-chan coord.Event, error) {
	in := make(chan coord.Event, 1024)
	out := make(chan coord.Event)
	c.st.mu.Lock()
	c.st.watches[in] = prefix
	c.st.mu.Unlock()
	go func() {
		defer close(out)
		defer func() {
			c.st.mu.Lock()
			delete(c.st.watches, in)
			c.st.mu.Unlock()
		}()
		for {
			select {
			case ev := <-in:
				select {
				case out <- ev:
				case <-ctx.Done():
					return
				}
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, nil
}

func (c *memClient) Describe() string { return "memory" }
func (c *memClient) Close() error     { return nil }

// The memory coordinator has only the core of the contract: the cases of
// the rest are skipped on errors.ErrUnsupported.

func (c *memClient) AttachProcess(context.Context, string, string, coord.ProcessInfo) error {
	return errors.ErrUnsupported
}
func (c *memClient) WatchLease(context.Context, string, string) (<-chan error, error) {
	return nil, errors.ErrUnsupported
}
func (c *memClient) RequestStop(_ context.Context, name string, _ uint64) (coord.LockInfo, bool, error) {
	return coord.LockInfo{Name: name}, false, errors.ErrUnsupported
}
func (c *memClient) WaitEnded(context.Context, string, uint64) error { return errors.ErrUnsupported }
func (c *memClient) RevokeToken(_ context.Context, name string, _ uint64) (coord.LockInfo, error) {
	return coord.LockInfo{Name: name}, errors.ErrUnsupported
}
func (c *memClient) SetLimit(context.Context, coord.Limit) error { return errors.ErrUnsupported }
func (c *memClient) ClearLimit(context.Context, string, bool) (coord.Limit, bool, error) {
	return coord.Limit{}, false, errors.ErrUnsupported
}
func (c *memClient) Limits(context.Context) ([]coord.Limit, error) { return nil, errors.ErrUnsupported }
func (c *memClient) Completion(context.Context, string, string) (coord.Completion, bool, error) {
	return coord.Completion{}, false, errors.ErrUnsupported
}
func (c *memClient) Complete(context.Context, string, coord.Completion, time.Duration) error {
	return errors.ErrUnsupported
}
func (c *memClient) Mark(context.Context, coord.Completion, time.Duration) error {
	return errors.ErrUnsupported
}
func (c *memClient) Forget(context.Context, string, string) (bool, error) {
	return false, errors.ErrUnsupported
}
func (c *memClient) Completions(context.Context, string) ([]coord.Completion, error) {
	return nil, errors.ErrUnsupported
}
