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
// Options.Settle has passed without a further change, which damps churn
// when members flap.
package shards

import (
	"context"
	"errors"
	"fmt"
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
	// ErrMoved is the cause of a shard's context when the group's map gives
	// it to another member: stop working on it and call Release.
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

// DefaultSettle is Options.Settle's default.
const DefaultSettle = time.Second

// Options says how a member joins.
type Options struct {
	// Shards is the group's number of shards (1..MaxShards). Every member
	// of a group must give the same number.
	Shards int
	// Member is this member's id (default coord.DefaultHolder()): 1 to 128
	// bytes, a lock name without "/".
	Member string
	// TTL of the member's and the shards' leases (default 15s).
	TTL time.Duration
	// Settle is how long a change of the membership or the settings must
	// stay unchanged before the map is recomputed (default DefaultSettle;
	// negative: at once).
	Settle time.Duration
	// Hold tunes the renewal of the leases (package fencing).
	Hold fencing.HoldOptions
	// Guard holds the group's settings (drain, serial); nil: none apply.
	Guard guard.Guard
	// Process, when set, is attached to the leases (coord.AcquireOptions).
	Process *coord.ProcessInfo
	// OnMove, when set, is told of each shard this member takes or gives up.
	// It runs on the member's goroutine and must not block for long.
	OnMove func(Move)
}

// Move is a shard taken or given up by this member.
type Move struct {
	Group  string
	Shard  int
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
	opts  Options

	self      *fencing.Held
	selfWatch *leaseWatch     // of the member's own lease; nil without one
	ctx       context.Context // the member's: ends at Leave or when its lease is lost
	cancel    context.CancelCauseFunc
	done      chan struct{}

	ev      chan any
	changed chan struct{}

	mu       sync.Mutex
	shards   map[int]*Shard // held (a shard whose context ended stays until released)
	target   []string       // the map in force
	members  []string
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
	// unwatch ends the watch of the shard's lease (nil without one) and
	// waits for it; lostSeen (the member's goroutine only): its end was
	// already reported.
	unwatch  func()
	lostSeen bool
}

// Token is the shard's fencing token.
func (s *Shard) Token() uint64 { return s.held.Token() }

// Lease is the shard's lease.
func (s *Shard) Lease() coord.Lease { return s.held.Lease() }

// Held is the shard's hold (its safe-until, renewals).
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
		if s.unwatch != nil {
			s.unwatch() // our own release must not read as a revocation
		}
		err = s.held.Release(ctx)
		s.m.send(released{s})
	})
	return err
}

// ShardLock is the lock of shard n of group.
func ShardLock(group string, n int) string { return group + "/shard/" + strconv.Itoa(n) }

// MemberLock is the lock of member id of group.
func MemberLock(group, id string) string { return group + "/members/" + id }

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

// events of the member's goroutine
type (
	acquired struct {
		n    int
		held *fencing.Held
		err  error
	}
	released struct{ s *Shard }
	lost     struct{ s *Shard }
	revoked  struct {
		s   *Shard
		err error
	}
	settingsRead struct {
		st  Settings
		err error
	}
)

// Join makes this process a member of group on c and returns at once; the
// member takes its shards in the background (Changed, Shards). Leave ends
// it. The error wraps coord.ErrInvalid for bad options, coord.ErrBusy when
// the member id is already live in the group.
func Join(ctx context.Context, c coord.Coordinator, group string, opts Options) (*Member, error) {
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
		opts.Settle = DefaultSettle
	}
	m := &Member{c: c, group: group, id: opts.Member, opts: opts,
		done: make(chan struct{}), ev: make(chan any, 64), changed: make(chan struct{}, 1),
		shards: map[int]*Shard{}}
	m.ctx, m.cancel = context.WithCancelCause(context.WithoutCancel(ctx))

	// The watch first, so that nothing between the list and it is missed.
	wctx, wcancel := context.WithCancel(m.ctx)
	events, err := c.Watch(wctx, group+"/")
	if err != nil {
		wcancel()
		return nil, err
	}
	self, err := fencing.Acquire(ctx, c, MemberLock(group, m.id),
		coord.AcquireOptions{TTL: opts.TTL, Holder: m.id, Wait: 0, Process: opts.Process}, opts.Hold)
	if err != nil {
		wcancel()
		if errors.Is(err, coord.ErrBusy) {
			return nil, fmt.Errorf("member %q of group %q is already live: %w", m.id, group, err)
		}
		return nil, err
	}
	m.self = self
	if opts.Guard != nil {
		if m.settings, err = LoadSettings(ctx, opts.Guard, group); err != nil {
			wcancel()
			_ = self.Release(context.WithoutCancel(ctx))
			return nil, err
		}
	}
	infos, err := c.List(ctx, group+"/")
	if err != nil {
		wcancel()
		_ = self.Release(context.WithoutCancel(ctx))
		return nil, err
	}
	m.selfWatch = m.watchLease(self.Lease())
	go m.loop(events, wcancel, infos)
	return m, nil
}

// ID is the member's id.
func (m *Member) ID() string { return m.id }

// Group is the group's name.
func (m *Member) Group() string { return m.group }

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
	out := make([]*Shard, 0, len(m.shards))
	for _, s := range m.shards {
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b *Shard) int { return a.Number - b.Number })
	return out
}

// Target returns the shards the map in force gives this member.
func (m *Member) Target() []int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return Of(m.target, m.id)
}

// Map returns the map in force (by shard: its member) and the live members.
func (m *Member) Map() (byShard []string, members []string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.target), slices.Clone(m.members)
}

// Settled says whether this member holds exactly its shards of the map in
// force, with no change waiting for the settle time.
func (m *Member) Settled() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.pending || m.target == nil {
		return false
	}
	want := Of(m.target, m.id)
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
	m.selfWatch.stop()
	if err := m.self.Release(ctx); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// send gives e to the member's goroutine; false when it has ended.
func (m *Member) send(e any) bool {
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
// the map after the settle time, and takes and gives up shards.
func (m *Member) loop(events <-chan coord.Event, stopWatch func(), infos []coord.LockInfo) {
	defer close(m.done)
	defer stopWatch()
	n := m.opts.Shards
	members := map[string]bool{m.id: true}
	owner := make([]string, n) // the holder of each shard lock, as seen
	take := func(info coord.LockInfo) {
		kind, id, k := parseLock(m.group, info.Name)
		switch kind {
		case "member":
			if info.Held {
				members[id] = true
			} else if id != m.id {
				delete(members, id)
			}
		case "shard":
			if k < n {
				owner[k] = ""
				if info.Held {
					owner[k] = info.Holder
				}
			}
		}
	}
	for _, info := range infos {
		take(info)
	}
	memberList := func() []string {
		out := make([]string, 0, len(members))
		for id := range members {
			out = append(out, id)
		}
		slices.Sort(out)
		return out
	}

	var (
		settle         *time.Timer
		settleC        <-chan time.Time
		retry          *time.Timer
		retryC         <-chan time.Time
		acquiring      = map[int]bool{}
		again          = map[int]bool{} // freed while an attempt was in flight
		reading        bool             // a settings read in flight
		reread         bool
		settingsFailed bool // the last settings read failed: again at the retry
	)
	arm := func() {
		m.mu.Lock()
		m.pending = true
		m.mu.Unlock()
		if m.opts.Settle < 0 {
			if settleC == nil {
				c := make(chan time.Time, 1)
				c <- time.Time{}
				settleC = c
			}
			return
		}
		if settle == nil {
			settle = time.NewTimer(m.opts.Settle)
		} else {
			settle.Stop()
			settle.Reset(m.opts.Settle)
		}
		settleC = settle.C
	}
	readSettings := func() {
		if m.opts.Guard == nil {
			return
		}
		if reading {
			reread = true
			return
		}
		reading = true
		go func() {
			ctx, cancel := context.WithTimeout(m.ctx, 10*time.Second)
			defer cancel()
			st, err := LoadSettings(ctx, m.opts.Guard, m.group)
			m.send(settingsRead{st, err})
		}()
	}
	var applied []string // the member list of the map in force
	var appliedSettings string
	apply := func() {
		m.mu.Lock()
		st := m.settings
		m.pending = false
		m.mu.Unlock()
		ms := memberList()
		t := Target(n, ms, st)
		key := fmt.Sprint(st.Drained, st.Serial != nil, deref(st.Serial))
		reason := "members " + strings.Join(applied, ",") + " → " + strings.Join(ms, ",")
		switch {
		case slices.Equal(applied, ms) && key != appliedSettings:
			reason = "settings: " + describe(st)
		case applied == nil:
			reason = "joined: members " + strings.Join(ms, ",")
		}
		applied, appliedSettings = ms, key
		m.mu.Lock()
		m.target, m.members = t, ms
		var away []*Shard
		for k, s := range m.shards {
			if t[k] != m.id && s.ctx.Err() == nil {
				away = append(away, s)
			}
		}
		m.mu.Unlock()
		for _, s := range away {
			s.cancel(ErrMoved)
			m.move(Move{Shard: s.Number, Kind: "given_up", Token: s.Token(), Reason: reason + " (to " + t[s.Number] + ")"})
		}
		m.notify()
	}
	acquire := func() {
		m.mu.Lock()
		t := m.target
		var want []int
		for k, id := range t {
			if id == m.id && m.shards[k] == nil && !acquiring[k] && owner[k] == "" {
				want = append(want, k)
			}
		}
		m.mu.Unlock()
		for _, k := range want {
			acquiring[k] = true
			go func(k int) {
				h, err := fencing.Acquire(m.ctx, m.c, ShardLock(m.group, k),
					coord.AcquireOptions{TTL: m.opts.TTL, Holder: m.id, Wait: 0, Process: m.opts.Process}, m.opts.Hold)
				if !m.send(acquired{k, h, err}) && h != nil {
					// The member ended meanwhile: nobody will work on it.
					rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					_ = h.Release(rctx)
					cancel()
				}
			}(k)
		}
	}

	m.mu.Lock()
	m.members = memberList()
	m.mu.Unlock()
	arm()
	selfDone := m.self.Context().Done()
	selfRevoked := m.selfWatch.channel()
	for {
		select {
		case err, ok := <-selfRevoked:
			selfRevoked = nil
			if ok && err != nil {
				m.cancel(fmt.Errorf("member %q of group %q: %w: %w", m.id, m.group, ErrRevoked, err))
			}
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
				continue
			}
			if ev.Type == coord.EventReset {
				infos, err := m.c.List(m.ctx, m.group+"/")
				if err == nil {
					for id := range members {
						delete(members, id)
					}
					members[m.id] = true
					clear(owner)
					for _, info := range infos {
						take(info)
					}
				}
				arm()
				readSettings()
				break
			}
			before := len(members)
			was := members[idOf(m.group, ev.Info.Name)]
			take(ev.Info)
			kind, id, k := parseLock(m.group, ev.Info.Name)
			switch kind {
			case "member":
				if len(members) != before || was != members[id] {
					arm()
				}
			case "settings":
				readSettings()
			case "shard":
				if k < n && owner[k] == "" && acquiring[k] {
					again[k] = true
				}
			}
			acquire()
		case <-settleC:
			settleC = nil
			apply()
			acquire()
		case e := <-m.ev:
			switch e := e.(type) {
			case acquired:
				acquiring[e.n] = false
				if e.err != nil {
					if errors.Is(e.err, coord.ErrBusy) {
						if again[e.n] {
							delete(again, e.n)
							owner[e.n] = ""
						} else if owner[e.n] == "" {
							owner[e.n] = "?" // held by someone: wait for its release
						}
					} else if m.ctx.Err() == nil {
						// Not before the retry lists it again: asked at once,
						// a coordinator in trouble would be asked in a loop.
						owner[e.n] = "?"
						if retry == nil {
							retry = time.NewTimer(time.Second)
						} else {
							retry.Reset(time.Second)
						}
						retryC = retry.C
					}
					acquire()
					break
				}
				delete(again, e.n)
				m.mu.Lock()
				keep := m.target != nil && m.target[e.n] == m.id && m.ctx.Err() == nil
				m.mu.Unlock()
				if !keep {
					rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					_ = e.held.Release(rctx)
					cancel()
					acquire()
					break
				}
				s := &Shard{Group: m.group, Number: e.n, m: m, held: e.held}
				s.ctx, s.cancel = context.WithCancelCause(e.held.Context())
				if w := m.watchLease(e.held.Lease()); w != nil {
					s.unwatch = w.stop
					go func() {
						if err, ok := <-w.ch; ok && err != nil {
							m.send(revoked{s, err})
						}
					}()
				}
				context.AfterFunc(e.held.Context(), func() {
					if c := context.Cause(e.held.Context()); errors.Is(c, coord.ErrLeaseLost) {
						m.send(lost{s})
					}
				})
				owner[e.n] = m.id
				m.mu.Lock()
				m.shards[e.n] = s
				m.mu.Unlock()
				m.move(Move{Shard: e.n, Kind: "taken", Token: s.Token()})
				m.notify()
			case released:
				m.mu.Lock()
				if m.shards[e.s.Number] == e.s {
					delete(m.shards, e.s.Number)
				}
				m.mu.Unlock()
				if owner[e.s.Number] == m.id {
					owner[e.s.Number] = ""
				}
				m.notify()
				acquire()
			case lost:
				if !e.s.lostSeen {
					e.s.lostSeen = true
					m.move(Move{Shard: e.s.Number, Kind: "lost", Token: e.s.Token(), Reason: context.Cause(e.s.held.Context()).Error()})
				}
				m.notify()
			case revoked:
				if e.s.ctx.Err() != nil {
					break // moved away, lost or left meanwhile
				}
				cause := fmt.Errorf("shard %d of group %q: %w: %w", e.s.Number, m.group, ErrRevoked, e.err)
				e.s.cancel(cause)
				kind := "given_up"
				if !errors.Is(e.err, coord.ErrStopRequested) {
					kind, e.s.lostSeen = "lost", true
				}
				m.move(Move{Shard: e.s.Number, Kind: kind, Token: e.s.Token(), Reason: "revoked: " + e.err.Error()})
				m.notify()
			case settingsRead:
				reading = false
				if e.err == nil {
					m.mu.Lock()
					m.settings = e.st
					m.mu.Unlock()
					arm()
				} else if m.ctx.Err() == nil {
					// Read them again in a second (with the retry below).
					settingsFailed = true
					if retry == nil {
						retry = time.NewTimer(time.Second)
					} else {
						retry.Reset(time.Second)
					}
					retryC = retry.C
				}
				if reread {
					reread = false
					readSettings()
				}
			}
		case <-retryC:
			retryC = nil
			if settingsFailed {
				settingsFailed = false
				readSettings()
			}
			clear(owner) // read again below: what was busy may be free
			if infos, err := m.c.List(m.ctx, m.group+"/"); err == nil {
				for _, info := range infos {
					take(info)
				}
			}
			acquire()
		}
	}
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
	mv.Group, mv.Member = m.group, m.id
	if m.opts.OnMove != nil {
		m.opts.OnMove(mv)
	}
}

func idOf(group, name string) string {
	_, id, _ := parseLock(group, name)
	return id
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func describe(st Settings) string {
	var parts []string
	if len(st.Drained) > 0 {
		parts = append(parts, "drained "+strings.Join(st.Drained, ","))
	}
	if st.Serial != nil {
		if *st.Serial != "" {
			parts = append(parts, "serial on "+*st.Serial)
		} else {
			parts = append(parts, "serial")
		}
	} else {
		parts = append(parts, "parallel")
	}
	return strings.Join(parts, ", ")
}

// leaseWatch is a coord.LeaseWatcher's watch of one lease: `fence revoke`
// asking its holder to stop (coord.ErrStopRequested) or ending it.
type leaseWatch struct {
	ch     <-chan error
	cancel context.CancelFunc
}

// watchLease watches l until the member ends or the watch is stopped; nil
// when the coordinator cannot (the renewals still find a revoked lease).
func (m *Member) watchLease(l coord.Lease) *leaseWatch {
	var w coord.LeaseWatcher
	if !coord.As(m.c, &w) {
		return nil
	}
	ctx, cancel := context.WithCancel(m.ctx)
	ch, err := w.WatchLease(ctx, l.Name, l.ID)
	if err != nil {
		cancel()
		return nil
	}
	return &leaseWatch{ch: ch, cancel: cancel}
}

// channel is the watch's channel (nil for no watch: never ready).
func (w *leaseWatch) channel() <-chan error {
	if w == nil {
		return nil
	}
	return w.ch
}

// stop ends the watch and waits for it: before the lease's own release.
func (w *leaseWatch) stop() {
	if w == nil {
		return
	}
	w.cancel()
	for range w.ch {
	}
}
