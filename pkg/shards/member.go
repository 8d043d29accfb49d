// Package shards partitions work among the members of a group: N shards,
// each owned by one member at a time under a lease of its own, with its own
// fencing token, so that storage can fence each shard separately.
//
// A member joins with a lease on the lock "GROUP/members/ID" and learns the
// other members by watching the group's locks (coord.Watch: no polling).
// Every member computes the same map from the live members and the group's
// settings (Target: rendezvous hashing with a balance bound), and takes the
// shards the map gives it, each a lease on "GROUP/shard/N" held with package
// fencing (renewed on the process's shared scheduler). A shard moves only
// when its old owner released it or its lease ended: the new owner takes it
// with an ordinary acquisition, which the coordinator grants to one holder
// at a time. A member whose shard is moved away is told through the shard's
// context (cause ErrMoved), stops its work on it and calls Shard.Release.
//
// Changes of the membership (and of the settings) are applied only after
// the settle time (WithSettle) has passed without a further change, which
// damps churn when members flap.
//
// # Goroutines and locks
//
// Each member has one goroutine of its own (Member.loop), the only one that
// changes the map in force and the set of held shards, and the only one
// that reads or writes its state (memberLoop: the view of the group, the
// acquisitions in flight, its timers) and Shard.lostSeen. It decides with
// the pure functions of state.go. The others reach it through its event
// channel (Member.send), each event a call of one of memberLoop's methods
// that the goroutine makes: an acquisition goroutine per shard asked for
// (acquired), the settings reader, one read at a time (settingsRead), the
// member's and each held shard's lease watch and the AfterFunc of a
// shard's loss (revoked, lost), and Shard.Release from any goroutine
// (released). send gives up once the member's goroutine has ended, so none
// of them blocks on a member that left; an acquisition answered then is
// released by its own goroutine.
//
// Member.mu guards what the methods share with that goroutine (shards,
// target, settings, pending, err). It is a leaf: held briefly, never
// across a coordinator call, a send or OnMove; only the contexts of
// shards are cancelled under it (finish), which runs no user code
// (context.AfterFunc callbacks run on goroutines of their own). The
// member's goroutine itself calls the coordinator for a List at a watch
// reset and at the retry, a WatchLease for each shard taken, and the
// Release (at most 5 s) of a shard taken after the map moved it away.
// OnMove runs on it: it must not call Leave, which waits for that
// goroutine to end.
package shards

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/fencing"
	"github.com/fence-dev/fence/pkg/guard"
)

var (
	// ErrMoved is the cause of a shard's context (wrapped, naming the shard
	// and the group) when the group's map gives it to another member: stop
	// working on it and call Release.
	ErrMoved = errors.New("shard moved to another member")
	// ErrLeft is the cause of the shards' contexts after Leave.
	ErrLeft = errors.New("member left the group")
	// ErrRevoked is the cause of a shard's context (and of the member's,
	// for its own lease) when `fence revoke` asked its holder to stop and
	// release (wrapping coord.ErrStopRequested), or ended its lease
	// (wrapping coord.ErrLeaseLost): stop working on it and call Release.
	// The map may give the shard back to this member: it takes it again
	// under a new token.
	ErrRevoked = errors.New("revoked")
)

// MaxShards is the largest number of shards of a group.
const MaxShards = 65536

// defaultSettle is the default of WithSettle (and of `fence shards run
// --settle`).
const defaultSettle = time.Second

// options says how a member joins: see the Option that sets each field.
type options struct {
	Shards  int // given to Join: 1..MaxShards, the same for every member
	Member  string
	TTL     time.Duration
	Settle  time.Duration
	Hold    []fencing.Option
	Guard   guard.Guard // nil: no settings apply
	Process *coord.ProcessInfo
	OnMove  func(Move)
}

// Option says how a member joins.
type Option func(*options)

// WithMember sets this member's id (default coord.DefaultHolder()): 1 to
// 128 bytes, a lock name without "/".
func WithMember(id string) Option { return func(o *options) { o.Member = id } }

// WithTTL sets the TTL of the member's and the shards' leases (default 15s).
func WithTTL(ttl time.Duration) Option { return func(o *options) { o.TTL = ttl } }

// WithSettle sets how long a change of the membership or the settings must
// stay unchanged before the map is recomputed (default 1s; negative: at
// once).
func WithSettle(d time.Duration) Option { return func(o *options) { o.Settle = d } }

// WithHold tunes the renewal of the leases (package fencing).
func WithHold(opts ...fencing.Option) Option { return func(o *options) { o.Hold = opts } }

// WithGuard sets the store of the group's settings (drain, serial): without
// one, none apply.
func WithGuard(g guard.Guard) Option { return func(o *options) { o.Guard = g } }

// WithProcess attaches p to the leases (coord.AcquireOptions.Process).
func WithProcess(p *coord.ProcessInfo) Option { return func(o *options) { o.Process = p } }

// OnMove sets a function told of each shard this member takes or gives up.
// It runs on the member's goroutine and must not block for long.
func OnMove(f func(Move)) Option { return func(o *options) { o.OnMove = f } }

// Move is a shard taken or given up by this member.
type Move struct {
	Group  string
	Shard  int
	Lock   string // the shard's lock, "GROUP/shard/N"
	Member string
	// Kind: "taken", "given_up" (moved to another member by the map),
	// "lost" (its lease ended).
	Kind   string
	Token  uint64
	Reason string
}

// Member is a member of a group. Its methods are safe for concurrent use.
type Member struct {
	c     coord.Coordinator
	group string
	id    string
	opts  options

	self    *fencing.Held
	unwatch func()          // ends the watch of the member's own lease
	ctx     context.Context // the member's: ends at Leave or when its lease is lost
	cancel  context.CancelCauseFunc
	done    chan struct{}

	ev      chan func(*memberLoop) // events: what the member's goroutine is to do
	changed chan struct{}

	mu       sync.Mutex
	shards   map[int]*Shard // held (a shard whose context ended stays until released)
	target   []string       // the map in force
	settings Settings
	pending  bool // a change waits for the settle time
	err      error
}

// Shard is a shard held by this member.
type Shard struct {
	Group  string
	Number int
	m      *Member
	held   *fencing.Held
	ctx    context.Context
	cancel context.CancelCauseFunc
	once   sync.Once
	// unwatch ends the watch of the shard's lease and waits for it;
	// lostSeen (the member's goroutine only): its end was already reported.
	unwatch  func()
	lostSeen bool
}

// Held is the shard's hold: its lease and fencing token, its safe-until,
// its renewals.
func (s *Shard) Held() *fencing.Held { return s.held }

// Context ends when the shard can no longer be worked on: its lease was
// lost (cause a *fencing.LostError), the map moved it away (ErrMoved),
// `fence revoke` asked for it or ended its lease (ErrRevoked), or the
// member left (ErrLeft).
func (s *Shard) Context() context.Context { return s.ctx }

// Release gives the shard up: call it once the work on it has stopped
// (after its context ended). The next owner can take it only then, or when
// its lease runs out.
func (s *Shard) Release(ctx context.Context) error {
	var err error
	s.once.Do(func() {
		s.cancel(ErrLeft)
		s.unwatch() // our own release must not read as a revocation
		err = s.held.Release(ctx)
		s.m.send(func(l *memberLoop) { l.released(s) })
	})
	return err
}

// shardLock is the lock of shard n of group.
func shardLock(group string, n int) string { return group + "/shard/" + strconv.Itoa(n) }

// memberLock is the lock of member id of group (Member.Lease().Name).
func memberLock(group, id string) string { return group + "/members/" + id }

// ValidateGroup checks a group name: a lock name (coord.ValidateName) short
// enough for its shards' and members' locks. The error wraps ErrInvalid.
func ValidateGroup(group string) error {
	if err := coord.ValidateName(group); err != nil {
		return fmt.Errorf("%w (group name)", err)
	}
	if len(group) > 100 {
		return fmt.Errorf("%w: group name is %d bytes, the limit is 100", coord.ErrInvalid, len(group))
	}
	return nil
}

// ValidateMember checks a member id. The error wraps ErrInvalid.
func ValidateMember(id string) error {
	if err := coord.ValidateName(id); err != nil {
		return fmt.Errorf("%w (member id)", err)
	}
	if len(id) > 128 || strings.Contains(id, "/") {
		return fmt.Errorf("%w: member id %q must be at most 128 bytes without /", coord.ErrInvalid, id)
	}
	return nil
}

// parseLock says what a lock of group is: a member (id), a shard (n), the
// settings, or nothing of the group's.
func parseLock(group, name string) (kind string, id string, n int) {
	rest, ok := strings.CutPrefix(name, group+"/")
	if !ok {
		return "", "", 0
	}
	if id, ok := strings.CutPrefix(rest, "members/"); ok && ValidateMember(id) == nil {
		return "member", id, 0
	}
	if s, ok := strings.CutPrefix(rest, "shard/"); ok {
		if k, err := strconv.Atoi(s); err == nil && k >= 0 && strconv.Itoa(k) == s {
			return "shard", "", k
		}
	}
	if rest == "settings" {
		return "settings", "", 0
	}
	return "", "", 0
}

// Join makes this process a member of group on c, a group of the given
// number of shards (1..MaxShards: every member of a group must give the
// same number), and returns at once; the member takes its shards in the
// background (Changed, Shards). Leave ends it. The error wraps
// coord.ErrInvalid for bad options, coord.ErrBusy when the member id is
// already live in the group.
func Join(ctx context.Context, c coord.Coordinator, group string, shards int, with ...Option) (*Member, error) {
	opts := options{Shards: shards}
	for _, f := range with {
		f(&opts)
	}
	if err := ValidateGroup(group); err != nil {
		return nil, err
	}
	if opts.Shards < 1 || opts.Shards > MaxShards {
		return nil, fmt.Errorf("%w: --shards must be 1 to %d, got %d", coord.ErrInvalid, MaxShards, opts.Shards)
	}
	if opts.Member == "" {
		opts.Member = coord.DefaultHolder()
	}
	if err := ValidateMember(opts.Member); err != nil {
		return nil, err
	}
	if opts.TTL == 0 {
		opts.TTL = 15 * time.Second
	}
	if err := coord.ValidateTTL(opts.TTL); err != nil {
		return nil, err
	}
	if opts.Settle == 0 {
		opts.Settle = defaultSettle
	}
	m := &Member{c: c, group: group, id: opts.Member, opts: opts,
		done: make(chan struct{}), ev: make(chan func(*memberLoop), 64), changed: make(chan struct{}, 1),
		shards: map[int]*Shard{}}
	m.ctx, m.cancel = context.WithCancelCause(context.WithoutCancel(ctx))

	// The watch first, so that nothing between the list and it is missed.
	wctx, wcancel := context.WithCancel(m.ctx)
	events, err := c.Watch(wctx, group+"/")
	if err != nil {
		wcancel()
		return nil, err
	}
	self, err := fencing.Acquire(ctx, c, memberLock(group, m.id),
		coord.AcquireOptions{TTL: opts.TTL, Holder: m.id, Wait: 0, Process: opts.Process}, opts.Hold...)
	if err != nil {
		wcancel()
		if errors.Is(err, coord.ErrBusy) {
			return nil, fmt.Errorf("member %q of group %q is already live: %w", m.id, group, err)
		}
		return nil, err
	}
	m.self = self
	fail := func(err error) (*Member, error) {
		wcancel()
		_ = self.Release(context.WithoutCancel(ctx))
		return nil, err
	}
	if opts.Guard != nil {
		if m.settings, err = LoadSettings(ctx, opts.Guard, group); err != nil {
			return fail(err)
		}
	}
	infos, err := c.List(ctx, group+"/")
	if err != nil {
		return fail(err)
	}
	m.unwatch = m.watchLease(self.Lease(), nil)
	go m.loop(events, wcancel, infos)
	return m, nil
}

// ID is the member's id.
func (m *Member) ID() string { return m.id }

// Lease is the member's own lease (on "GROUP/members/ID"), as last renewed.
func (m *Member) Lease() coord.Lease { return m.self.Lease() }

// Changed receives a value (at most one pending) whenever Shards or the map
// change.
func (m *Member) Changed() <-chan struct{} { return m.changed }

// Done is closed when the member has left the group: Leave, or its own
// lease was lost (Err says which).
func (m *Member) Done() <-chan struct{} { return m.done }

// Err is why the member left (nil while it is a member).
func (m *Member) Err() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.err
}

// Context ends when the member leaves the group.
func (m *Member) Context() context.Context { return m.ctx }

// Shards returns the shards held, in ascending order, including those whose
// context has ended and that are not yet released.
func (m *Member) Shards() []*Shard {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.SortedFunc(maps.Values(m.shards), func(a, b *Shard) int { return a.Number - b.Number })
}

// Settled says whether this member holds exactly its shards of the map in
// force, with no change waiting for the settle time.
func (m *Member) Settled() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.pending || m.target == nil {
		return false
	}
	want := of(m.target, m.id)
	if len(want) != len(m.shards) {
		return false
	}
	for _, n := range want {
		s := m.shards[n]
		if s == nil || s.ctx.Err() != nil {
			return false
		}
	}
	return true
}

// Leave ends the member: every shard's context ends (ErrLeft), the shards
// and the member's lease are released. Stop the work on the shards first.
func (m *Member) Leave(ctx context.Context) error {
	m.cancel(ErrLeft)
	<-m.done
	var errs []error
	for _, s := range m.Shards() {
		if err := s.Release(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	m.unwatch()
	if err := m.self.Release(ctx); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// send gives e to the member's goroutine, which calls it; false when it
// has ended.
func (m *Member) send(e func(*memberLoop)) bool {
	select {
	case m.ev <- e:
		return true
	case <-m.done:
		return false
	}
}

func (m *Member) notify() {
	select {
	case m.changed <- struct{}{}:
	default:
	}
}

// loop is the member's goroutine: it follows the group's locks, applies
// the map after the settle time, and takes and gives up shards. It owns a
// memberLoop; what it does on each event is that type's methods.
func (m *Member) loop(events <-chan coord.Event, stopWatch func(), infos []coord.LockInfo) {
	defer close(m.done)
	defer stopWatch()
	l := newLoop(m)
	defer l.settling.Stop()
	defer l.retrying.Stop()
	if m.opts.Guard != nil {
		go m.reader(l.reads)
	}
	l.view.reset(infos)
	l.arm()
	selfDone := m.self.Context().Done()
	for {
		l.claim() // what happened may have made shards this member's to ask for
		select {
		case <-m.ctx.Done():
			m.finish(context.Cause(m.ctx))
			return
		case <-selfDone:
			m.cancel(context.Cause(m.self.Context()))
			m.finish(fmt.Errorf("member %q of group %q: %w", m.id, m.group, context.Cause(m.self.Context())))
			return
		case ev, ok := <-events:
			if !ok {
				// The watch ended without Leave: the coordinator was closed.
				m.cancel(errors.New("the watch of the group ended"))
				events = nil
				continue
			}
			l.watched(ev)
		case <-l.settling.C:
			l.apply()
		case <-l.retrying.C:
			l.retry()
		case e := <-m.ev:
			e(l)
		}
	}
}

// memberLoop is the state of the member's goroutine, its own (see the
// package doc: Goroutines and locks).
type memberLoop struct {
	m         *Member
	view      view
	acquiring map[int]bool // in flight, by shard: true once its lock was seen freed meanwhile
	heldBack  map[int]bool // refused by an operator limit: see at the retry
	// reads asks the settings reader (Member.reader) for a read: one slot,
	// so that one asked for while another runs follows it, however often
	// it was asked (nil without a guard). readFailed: the last read
	// failed, and is made again at the retry.
	reads      chan struct{}
	readFailed bool
	applied    applied // what the map in force was computed from
	// The member acts without an event when one of these fires (each is
	// stopped until armed): settling at the end of the settle time after
	// the last change (arm), to recompute the map; retrying retryAfter
	// after the last failure (armRetry), to try again what failed
	// (acquisitions, a settings read) and list the shard locks again.
	settling, retrying *time.Timer
}

func newLoop(m *Member) *memberLoop {
	l := &memberLoop{m: m, view: newView(m.group, m.id, m.opts.Shards), acquiring: map[int]bool{}, heldBack: map[int]bool{},
		settling: time.NewTimer(time.Hour), retrying: time.NewTimer(time.Hour)}
	l.settling.Stop()
	l.retrying.Stop()
	if m.opts.Guard != nil {
		l.reads = make(chan struct{}, 1)
	}
	return l
}

// arm (re)starts the settle time: a change waits for it. A negative settle
// is none: the map is recomputed at once.
func (l *memberLoop) arm() {
	l.m.mu.Lock()
	l.m.pending = true
	l.m.mu.Unlock()
	l.settling.Reset(max(l.m.opts.Settle, 0))
}

// armRetry (re)starts the retry: another failure pushes it back.
func (l *memberLoop) armRetry() { l.retrying.Reset(retryAfter) }

// watched takes in an event of the group's watch.
func (l *memberLoop) watched(ev coord.Event) {
	m := l.m
	if ev.Type == coord.EventReset {
		if infos, err := m.c.List(m.ctx, m.group+"/"); err == nil {
			l.view.reset(infos)
		}
		l.arm()
		l.readSettings()
		return
	}
	kind, k, changed := l.view.see(ev.Info)
	switch kind {
	case "member":
		if changed {
			l.arm()
		}
	case "settings":
		l.readSettings()
	case "shard":
		if _, inFlight := l.acquiring[k]; inFlight && l.view.free(k) {
			l.acquiring[k] = true
		}
	}
}

// readSettings asks for a read of the settings.
func (l *memberLoop) readSettings() {
	select {
	case l.reads <- struct{}{}:
	default: // one is asked for already
	}
}

// reader reads the settings once per request and reports them
// (settingsRead), until the member's goroutine ends.
func (m *Member) reader(reads <-chan struct{}) {
	for {
		select {
		case <-reads:
		case <-m.done:
			return
		}
		ctx, cancel := context.WithTimeout(m.ctx, 10*time.Second)
		st, err := LoadSettings(ctx, m.opts.Guard, m.group)
		cancel()
		if !m.send(func(l *memberLoop) { l.settingsRead(st, err) }) {
			return
		}
	}
}

func (l *memberLoop) settingsRead(st Settings, err error) {
	m := l.m
	if err == nil {
		m.mu.Lock()
		m.settings = st
		m.mu.Unlock()
		l.arm()
	} else if m.ctx.Err() == nil {
		l.readFailed = true
		l.armRetry() // read them again then
	}
}

// retryRead asks again for a read that failed, at the retry (once).
func (l *memberLoop) retryRead() {
	if l.readFailed {
		l.readFailed = false
		l.readSettings()
	}
}

// retry tries again what failed: a settings read, and (the loop's claim)
// every shard whose lock is free in a fresh listing.
func (l *memberLoop) retry() {
	l.retryRead()
	clear(l.view.owner) // listed again below: what was busy may be free
	if infos, err := l.m.c.List(l.m.ctx, l.m.group+"/"); err == nil {
		l.view.relist(infos)
	}
	l.recheckLimits()
}

// recheckLimits reads the limits once for the shards held back by one and
// leaves those it still holds back out of the claims until the next retry.
func (l *memberLoop) recheckLimits() {
	m := l.m
	if len(l.heldBack) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(m.ctx, 10*time.Second)
	ls, err := m.c.Limits(ctx)
	cancel()
	if err == nil {
		m.mu.Lock()
		l.heldBack = stillHeldBack(l.heldBack, m.target, m.id, m.shards, ls, m.group)
		m.mu.Unlock()
	}
	for k := range l.heldBack {
		if l.view.free(k) {
			l.view.owner[k] = "?"
		}
	}
	if len(l.heldBack) > 0 {
		l.armRetry()
	}
}

// apply computes the map of the members seen and the settings read, and
// ends the contexts of the shards it moves away.
func (l *memberLoop) apply() {
	m := l.m
	m.mu.Lock()
	st := m.settings
	m.pending = false
	m.mu.Unlock()
	ms := l.view.memberList()
	t, now, reason := plan(m.opts.Shards, ms, st, l.applied)
	l.applied = now
	m.mu.Lock()
	m.target = t
	away := awayFrom(t, m.id, m.shards)
	m.mu.Unlock()
	for _, s := range away {
		s.cancel(fmt.Errorf("shard %d of group %q: %w", s.Number, m.group, ErrMoved))
		m.move(Move{Shard: s.Number, Kind: "given_up", Token: s.held.Token(), Reason: reason + " (to " + t[s.Number] + ")"})
	}
	m.notify()
}

// claim asks for each shard that claims gives, each on a goroutine of its
// own that reports the answer (acquired).
func (l *memberLoop) claim() {
	m := l.m
	m.mu.Lock()
	want := claims(m.target, m.id, m.shards, l.acquiring, &l.view)
	m.mu.Unlock()
	for _, k := range want {
		l.acquiring[k] = false
		go func(k int) {
			h, err := fencing.Acquire(m.ctx, m.c, shardLock(m.group, k),
				coord.AcquireOptions{TTL: m.opts.TTL, Holder: m.id, Wait: 0, Process: m.opts.Process}, m.opts.Hold...)
			if !m.send(func(l *memberLoop) { l.acquired(k, h, err) }) && h != nil {
				releaseSoon(h) // the member ended meanwhile: nobody will work on it
			}
		}(k)
	}
}

// releaseSoon releases a shard's lease taken to no use, within 5 s.
func releaseSoon(h *fencing.Held) {
	rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = h.Release(rctx)
}

// acquired performs acquireOutcome's decision on an acquisition's answer.
func (l *memberLoop) acquired(n int, held *fencing.Held, err error) {
	m := l.m
	freed := l.acquiring[n]
	delete(l.acquiring, n)
	m.mu.Lock()
	mine := m.target != nil && m.target[n] == m.id
	m.mu.Unlock()
	next := acquireOutcome(err, freed, mine, m.ctx.Err() != nil)
	switch next {
	case keepShard:
		delete(l.heldBack, n)
		l.hold(n, held)
	case giveBack:
		releaseSoon(held)
	case askAgain:
		l.view.owner[n] = ""
	case heldBack:
		l.heldBack[n] = true
		l.view.owner[n] = "?" // a thaw sends no event: see at the retry
		l.armRetry()
	case waitFree:
		if l.view.free(n) {
			l.view.owner[n] = "?" // held by someone: wait for its release
		}
	case retryLater:
		l.view.owner[n] = "?" // not before the retry lists it again
		l.armRetry()
	case dropped:
	}
}

// hold makes a Shard of a lease taken: its lease watch, its loss, the
// member's map of shards.
func (l *memberLoop) hold(n int, held *fencing.Held) {
	m := l.m
	s := &Shard{Group: m.group, Number: n, m: m, held: held}
	s.ctx, s.cancel = context.WithCancelCause(held.Context())
	s.unwatch = m.watchLease(held.Lease(), s)
	context.AfterFunc(held.Context(), func() {
		if c := context.Cause(held.Context()); errors.Is(c, coord.ErrLeaseLost) {
			m.send(func(l *memberLoop) { l.lost(s) })
		}
	})
	l.view.owner[n] = m.id
	m.mu.Lock()
	m.shards[n] = s
	m.mu.Unlock()
	m.move(Move{Shard: n, Kind: "taken", Token: s.held.Token()})
	m.notify()
}

// released forgets a shard its user released.
func (l *memberLoop) released(s *Shard) {
	m := l.m
	m.mu.Lock()
	if m.shards[s.Number] == s {
		delete(m.shards, s.Number)
	}
	m.mu.Unlock()
	if l.view.owner[s.Number] == m.id {
		l.view.owner[s.Number] = ""
	}
	m.notify()
}

// lost reports a shard's lease ended (once).
func (l *memberLoop) lost(s *Shard) {
	if !s.lostSeen {
		s.lostSeen = true
		l.m.move(Move{Shard: s.Number, Kind: "lost", Token: s.held.Token(), Reason: context.Cause(s.held.Context()).Error()})
	}
	l.m.notify()
}

// revoked ends a shard's context for `fence revoke` (asked: given up; its
// lease ended: lost), or the member's for its own lease (s nil).
func (l *memberLoop) revoked(s *Shard, err error) {
	m := l.m
	if s == nil {
		if !expired(m.self, err) {
			m.cancel(fmt.Errorf("member %q of group %q: %w: %w", m.id, m.group, ErrRevoked, err))
		}
		return
	}
	if s.ctx.Err() != nil || expired(s.held, err) {
		return // moved away, lost or left meanwhile; or lost now (see lost)
	}
	s.cancel(fmt.Errorf("shard %d of group %q: %w: %w", s.Number, m.group, ErrRevoked, err))
	kind := "given_up"
	if !errors.Is(err, coord.ErrStopRequested) {
		kind, s.lostSeen = "lost", true
	}
	m.move(Move{Shard: s.Number, Kind: kind, Token: s.held.Token(), Reason: "revoked: " + err.Error()})
	m.notify()
}

// expired tells whether a lease whose end the lease watch reported (err)
// expired because it was not renewed in time: this process was stopped or
// starved past its safe-until (SIGSTOP, a suspended VM), which the watch
// may report before the hold's own timer does. held.Check then ends the
// hold's context with what happened ("… is no longer safe: this process
// was paused …"), and the loss is reported as such (lost, ErrLeaseLost),
// not as a revocation. A stop request is never an expiry.
func expired(held *fencing.Held, err error) bool {
	return !errors.Is(err, coord.ErrStopRequested) && errors.Is(held.Check(), coord.ErrLeaseLost)
}

// finish ends every shard's context and records why the member left.
func (m *Member) finish(cause error) {
	m.mu.Lock()
	if m.err == nil {
		m.err = cause
	}
	for _, s := range m.shards {
		s.cancel(cause)
	}
	m.mu.Unlock()
	m.notify()
}

func (m *Member) move(mv Move) {
	mv.Group, mv.Member, mv.Lock = m.group, m.id, shardLock(m.group, mv.Shard)
	if m.opts.OnMove != nil {
		m.opts.OnMove(mv)
	}
}

// watchLease watches l (coord.LeaseWatcher: `fence revoke` asking its
// holder to stop, with coord.ErrStopRequested, or ending it) until the
// member ends or stop is called, and tells the member's goroutine of its
// end (revoked; s nil for the member's own lease). When the watch cannot
// start, the renewals still find a revoked lease. stop ends the watch and
// waits for it: before the lease's own release.
func (m *Member) watchLease(l coord.Lease, s *Shard) (stop func()) {
	ctx, cancel := context.WithCancel(m.ctx)
	ch, err := m.c.WatchLease(ctx, l.Name, l.ID)
	if err != nil {
		cancel()
		return func() {}
	}
	go func() {
		if err, ok := <-ch; ok && err != nil {
			m.send(func(l *memberLoop) { l.revoked(s, err) })
		}
	}()
	return func() {
		cancel()
		for range ch {
		}
	}
}
