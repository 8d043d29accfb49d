package history

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/fence-dev/fence/pkg/coord"
	hopts "github.com/fence-dev/fence/pkg/history/internal/opts"
	"github.com/fence-dev/fence/pkg/internal/coordkit"
)

// Recorder is a coord.Coordinator that records the lease events it sees in a
// Store, and reads them back:
//
//   - acquired (token, holder, wait) when Acquire succeeds, preceded by
//     expired for the previous holder when its lease ended without a release
//     or revoke on record (it expired, or its processes died, and was taken
//     over);
//   - released (held for) when Release ends a lease that still holds the
//     lock, and expired when Release finds that lease already gone;
//   - revoked when Revoke or RevokeToken ends a lease, or when
//     RequestStop asks its holder to stop (once per lease: a RevokeToken
//     after the ask records nothing more).
//
// released and revoked are written just before the request that ends the
// lease, so that a successor never finds the lock free with the end of its
// previous lease not yet on record (it would take it for an expiry).
//
// Recording never fails a lease operation: a write that fails is logged
// (slog, at warn level) and kept in memory, to be written before the next
// event once the store can be written again (see pendingEvents), and kept in the
// spool at Close when they still cannot (WithSpool). The other events
// (renewal_failed, lease_lost, deadline_exceeded, stale_refused) are the
// caller's to Record.
//
// A Recorder is safe for concurrent use.
type Recorder interface {
	coord.Coordinator
	Store
	// CloseContext is Close with the writes of what is still pending
	// bounded by ctx's deadline too (a caller that must exit soon, like
	// `fence run` after it stopped its command on a coordinator that does
	// not answer): what cannot be written by then is kept in the spool
	// (WithSpool), else logged as lost.
	CloseContext(ctx context.Context) error
	// FlushSpool writes the events kept in the spool (WithSpool) to the
	// store, with their original times, oldest first, and returns how many
	// it wrote. Its writes are bounded by spoolFlushTimeout (and ctx's
	// deadline). Of Recorders flushing one spool at once, each file is
	// written by one. A damaged spool file is set aside with a warning.
	// Without a spool it does nothing.
	FlushSpool(ctx context.Context) (int, error)
	// Store returns the store the events are written to.
	Store() Store
	// Unwrap returns the decorated coordinator (to reach a backend's own
	// methods, such as etcd's Client).
	Unwrap() coord.Coordinator
}

// recorder is the Recorder that Wrap returns. The operations it does not
// define are passed to the embedded coordinator unchanged: they record
// nothing (Renew, the reads, and the operator limits, which their callers
// record as Frozen, Limited and Thawed); the history's reads (History,
// Since, Heads) are the embedded store's.
type recorder struct {
	coord.Coordinator
	store
	opts    hopts.Options
	log     *slog.Logger
	pending *pendingEvents
	spool   *spool // WithSpool, else nil

	mu    sync.Mutex
	held  map[string]heldLease // by lease id: leases acquired through this Recorder
	asked map[string]uint64    // by lock: the token a stop was requested of (revoked on record)
}

type heldLease struct {
	token  uint64
	holder string
	start  time.Time // monotonic
}

// maxHeld bounds the leases a Recorder remembers (leases that end without a
// Release through it, by expiry, would otherwise pile up).
const maxHeld = 4096

// scanBack is how many of a lock's latest events are searched for the last
// lease event (acquired, released, revoked, expired) when looking for a
// lease that ended unrecorded.
const scanBack = 32

var _ Recorder = (*recorder)(nil)

// store is the Store a recorder writes to, embedded under this name
// (Store is the Recorder's method that returns it).
type store = Store

// Wrap returns a Recorder that records c's lease events in s. Options set
// the logger, the clock, the timeout of each write and the pending buffer
// (the bounds are the store's own). A negative value, which the stores
// refuse, is replaced by its default and logged at warn level: Wrap has
// no error to return, and the other options are kept. Closing the Recorder
// closes c.
func Wrap(c coord.Coordinator, s Store, opts ...Option) Recorder {
	o, errs := hopts.Lenient(opts)
	for _, err := range errs {
		o.Logger.Warn("history: option ignored, the default is used", "err", err)
	}
	r := &recorder{Coordinator: c, store: s, opts: o, log: o.Logger, held: map[string]heldLease{}, asked: map[string]uint64{}}
	r.pending = &pendingEvents{h: s, max: o.MaxPending}
	if o.SpoolDir != "" {
		r.spool = &spool{dir: o.SpoolDir, log: o.Logger}
	}
	return r
}

// Unwrap implements Recorder.
func (r *recorder) Unwrap() coord.Coordinator { return r.Coordinator }

// Store implements Recorder.
func (r *recorder) Store() Store { return r.store }

// Acquire implements coord.Coordinator, remembers the lease and records
// the acquisition before it returns.
func (r *recorder) Acquire(ctx context.Context, name string, opts coord.AcquireOptions) (*coord.Lease, error) {
	start := time.Now()
	l, err := r.Coordinator.Acquire(ctx, name, opts)
	if err != nil {
		return l, err
	}
	wait := time.Since(start)
	r.remember(l.ID, heldLease{token: l.Token, holder: l.Holder, start: start.Add(wait)})
	r.recordAcquired(ctx, name, l, wait, opts.Slots)
	return l, nil
}

// recordAcquired records the acquisition of l after wait: acquired,
// preceded by expired for the previous holder when its end is not on record
// (of a semaphore, slots above 1, only when it no longer holds a slot: its
// holders overlap).
func (r *recorder) recordAcquired(ctx context.Context, name string, l *coord.Lease, wait time.Duration, slots int) {
	// The lease is running: spend at most a quarter of it on the history.
	timeout := r.opts.RecordTimeout
	if q := l.TTL / 4; q > 0 && q < timeout {
		timeout = q
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	now := r.opts.Now()
	var evs []Event
	last, ok := r.lastLeaseEvent(rctx, name)
	if ok && last.Kind == Acquired && last.Token < l.Token && !r.stillHolds(rctx, name, last.Token, slots) {
		evs = append(evs, Event{Time: now, Lock: name, Kind: Expired, Holder: last.Holder, Token: last.Token, LeaseID: last.LeaseID})
	}
	evs = append(evs, Event{Time: now, Lock: name, Kind: Acquired, Holder: l.Holder, Token: l.Token, Wait: wait, LeaseID: l.ID})
	r.write(rctx, evs...)
}

// stillHolds reports whether the holder with token still holds a slot of
// lock name, a semaphore of slots (false for a lock: one holder, and a new
// one holds it now). When the lock cannot be read it says yes: no expired
// is recorded that may be false.
func (r *recorder) stillHolds(ctx context.Context, name string, token uint64, slots int) bool {
	if slots <= 1 {
		return false
	}
	info, err := r.Coordinator.Inspect(ctx, name)
	if err != nil {
		return true
	}
	_, ok := coordkit.HeldBy(info, token)
	return ok
}

// holderOf returns the holder of info that is picks (a semaphore's any
// holder), as the LockInfo of a lock held by it alone.
func holderOf(info coord.LockInfo, is func(coord.HolderInfo) bool) (coord.LockInfo, bool) {
	for _, h := range info.AllHolders() {
		if is(h) {
			one := coord.LockInfo{Name: info.Name}
			coordkit.SetHolders(&one, 0, []coord.HolderInfo{h})
			return one, true
		}
	}
	return coord.LockInfo{}, false
}

// Release implements coord.Coordinator. It records released when the lease
// still holds the lock, expired when it is gone with no end on record: the
// lock's last lease event is its acquired, found by its token when the
// lease was acquired through this Recorder, else by its lease id (a release
// from another process, such as `fence release` after `fence acquire`).
func (r *recorder) Release(ctx context.Context, name, leaseID string) error {
	known, isKnown := r.forget(leaseID)
	if isKnown {
		if done, err := r.releaseRecorded(ctx, name, leaseID, known); done {
			return err
		}
	}
	info, ierr := r.Coordinator.Inspect(ctx, name)
	rctx, cancel := r.recordContext(ctx)
	defer cancel()
	now := r.opts.Now()
	if h, ok := holderOf(info, func(h coord.HolderInfo) bool { return h.LeaseID == leaseID }); ierr == nil && ok {
		info = h // of a semaphore: the holder releasing
	}
	switch {
	case ierr == nil && info.Held && info.LeaseID == leaseID:
		ev := Event{Time: now, Lock: name, Kind: Released, Holder: info.Holder, Token: info.Token}
		if isKnown && known.token == info.Token {
			ev.HeldFor = time.Since(known.start)
		} else {
			ev.HeldFor = info.HeldFor(now)
		}
		r.write(rctx, ev)
	case ierr == nil:
		// The lease is gone: unless its end is on record, it expired. (A
		// successor that takes the lock meanwhile finds this expired on
		// record, or writes it itself, before its acquired.)
		last, ok := r.lastLeaseEvent(rctx, name)
		if ok && last.Kind == Acquired &&
			(isKnown && last.Token == known.token || !isKnown && last.LeaseID != "" && last.LeaseID == leaseID) {
			r.write(rctx, Event{Time: now, Lock: name, Kind: Expired, Holder: last.Holder, Token: last.Token, LeaseID: last.LeaseID})
		}
	}
	err := r.Coordinator.Release(ctx, name, leaseID)
	if err == nil && ierr != nil && isKnown {
		// The lock could not be read but the release went through: the
		// lease was held until now, or already gone; say released.
		r.write(rctx, Event{Time: r.opts.Now(), Lock: name, Kind: Released,
			Holder: known.holder, Token: known.token, HeldFor: time.Since(known.start)})
	}
	return err
}

// releaseRecorded writes the released event of a lease this Recorder
// acquired in one step with the release, where the store can
// (releaseAppender) and no event is pending (they go first, and would not
// be in that step). done false: nothing was written or released.
func (r *recorder) releaseRecorded(ctx context.Context, name, leaseID string, known heldLease) (done bool, err error) {
	ra, ok := r.store.(releaseAppender)
	if !ok {
		return false, nil
	}
	ev := Event{Time: r.opts.Now(), Lock: name, Kind: Released, Holder: known.holder, Token: known.token,
		HeldFor: time.Since(known.start)}
	r.pending.whenEmpty(func() {
		var werr error
		done, werr = ra.AppendRelease(ctx, r.Coordinator, leaseID, known.token, ev)
		if done {
			err = werr
		} else if werr != nil {
			r.log.Debug("history: could not record the release with it; recording it apart", "lock", name, "err", werr)
		}
	})
	return done, err
}

// recordContext bounds a write the Recorder makes on its own behalf
// around a call with ctx: by RecordTimeout, and by ctx's deadline when that
// comes first, but not by ctx's cancellation (a record that must precede a
// release is not dropped because the caller gave up waiting).
func (r *recorder) recordContext(ctx context.Context) (context.Context, context.CancelFunc) {
	d := r.opts.RecordTimeout
	if dl, ok := ctx.Deadline(); ok {
		d = max(min(d, time.Until(dl)), 0)
	}
	return context.WithTimeout(context.WithoutCancel(ctx), d)
}

// Revoke implements coord.Coordinator and records revoked for the lease it
// ends.
func (r *recorder) Revoke(ctx context.Context, name string) (coord.LockInfo, error) {
	return r.revoke(ctx, name, 0, func() (coord.LockInfo, error) { return r.Coordinator.Revoke(ctx, name) })
}

// revoke records revoked around end, which ends the lease of lock name held
// under token (0: whoever holds it).
func (r *recorder) revoke(ctx context.Context, name string, token uint64, end func() (coord.LockInfo, error)) (coord.LockInfo, error) {
	info, ierr := r.Coordinator.Inspect(ctx, name)
	rctx, cancel := r.recordContext(ctx)
	defer cancel()
	if h, ok := holderOf(info, func(h coord.HolderInfo) bool { return h.Token == token }); ierr == nil && token != 0 && ok {
		info = h // of a semaphore: the holder named
	}
	// A semaphore's holders are named by token: with none named, the end
	// fails (coordkit.ManyHolders) and there is nothing to record yet.
	pre := ierr == nil && info.Held && (token == 0 || info.Token == token) && (token != 0 || len(info.Holders) <= 1)
	if pre && !r.wasAsked(name, info.Token) {
		r.write(rctx, r.revoked(name, info))
	}
	got, err := end()
	if err == nil && (!pre || got.Token != info.Token) && !r.wasAsked(name, got.Token) {
		// The holder changed between the read and the revoke.
		r.write(rctx, r.revoked(name, got))
	}
	return got, err
}

// revoked is the revoked event of the holder i.
func (r *recorder) revoked(name string, i coord.LockInfo) Event {
	now := r.opts.Now()
	return Event{Time: now, Lock: name, Kind: Revoked, Holder: i.Holder, Token: i.Token, HeldFor: i.HeldFor(now)}
}

// wasAsked reports whether this Recorder recorded a stop request of the
// holder of lock name with token (its revoked is on record).
func (r *recorder) wasAsked(name string, token uint64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return token != 0 && r.asked[name] == token
}

// RequestStop implements coord.Coordinator. A holder
// that was asked is on record as revoked: asked to stop, it ends its lease.
func (r *recorder) RequestStop(ctx context.Context, name string, token uint64) (coord.LockInfo, bool, error) {
	info, asked, err := r.Coordinator.RequestStop(ctx, name, token)
	if err != nil || !asked || r.wasAsked(name, info.Token) {
		return info, asked, err
	}
	r.mu.Lock()
	if len(r.asked) >= maxHeld {
		clear(r.asked)
	}
	r.asked[name] = info.Token
	r.mu.Unlock()
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.opts.RecordTimeout)
	defer cancel()
	r.write(rctx, r.revoked(name, info))
	return info, asked, nil
}

// RevokeToken implements coord.Coordinator, and records revoked as Revoke
// does, unless it is on record from RequestStop.
func (r *recorder) RevokeToken(ctx context.Context, name string, token uint64) (coord.LockInfo, error) {
	return r.revoke(ctx, name, token, func() (coord.LockInfo, error) { return r.Coordinator.RevokeToken(ctx, name, token) })
}

// Close writes what is still pending (briefly) and closes the decorated
// coordinator.
func (r *recorder) Close() error { return r.CloseContext(context.Background()) }

// CloseContext implements Recorder.
func (r *recorder) CloseContext(ctx context.Context) error {
	ctx, cancel := r.recordContext(ctx)
	defer cancel()
	if err := r.pending.appendEvents(ctx, nil); err != nil {
		r.keep(err)
	}
	return r.Coordinator.Close()
}

// keep puts the pending events, which could not be written (err), in the
// spool, and says so.
func (r *recorder) keep(err error) {
	if r.spool == nil {
		r.log.Warn("history: events could not be recorded", "events", r.pending.count(), "err", err)
		return
	}
	evs := r.pending.take()
	dropped, serr := r.spool.keep(evs)
	if serr != nil {
		r.log.Warn("history: events could not be recorded, nor kept on this host", "events", len(evs), "err", err, "spool_err", serr)
		return
	}
	r.log.Warn("history: events could not be recorded; kept on this host, to be written when the coordinator answers",
		"events", len(evs), "spool", r.spool.dir, "err", err)
	if dropped > 0 {
		r.log.Warn("history: spool full: the oldest events were dropped", "spool", r.spool.dir, "dropped", dropped)
	}
}

// FlushSpool implements Recorder.
func (r *recorder) FlushSpool(ctx context.Context) (int, error) {
	if r.spool == nil {
		return 0, nil
	}
	ctx, cancel := context.WithTimeout(ctx, spoolFlushTimeout)
	defer cancel()
	return r.spool.flush(ctx, r.store)
}

// Record implements Store: it writes the events still pending,
// then ev; when that fails, ev is kept to be written later and the error is
// returned. A zero ev.Time is now.
func (r *recorder) Record(ctx context.Context, ev Event) error {
	return r.Append(ctx, []Event{ev})
}

// Append records events in order, as Record does.
func (r *recorder) Append(ctx context.Context, evs []Event) error {
	now := r.opts.Now()
	evs = append([]Event(nil), evs...)
	for i := range evs {
		if evs[i].Time.IsZero() {
			evs[i].Time = now
		}
	}
	return r.pending.appendEvents(ctx, evs)
}

// write records events on the Recorder's own behalf: failures are logged,
// and the events kept for later.
func (r *recorder) write(ctx context.Context, evs ...Event) {
	err := r.pending.appendEvents(ctx, evs)
	if err == nil {
		return
	}
	level := slog.LevelWarn
	if errors.Is(err, coord.ErrInvalid) {
		level = slog.LevelDebug // nothing an operator can do about it
	}
	r.log.Log(ctx, level, "history: could not record event", "lock", evs[0].Lock, "kind", string(evs[len(evs)-1].Kind),
		"pending", r.pending.count(), "err", err)
}

// lastLeaseEvent returns the latest acquired, released, revoked or expired
// event among the last scanBack events of lock.
func (r *recorder) lastLeaseEvent(ctx context.Context, lock string) (Event, bool) {
	if lr, ok := r.store.(leaseReader); ok {
		ev, ok, err := lr.LastLease(ctx, lock, scanBack)
		if err != nil {
			r.log.Debug("history: could not read the lock's last lease event", "lock", lock, "err", err)
			return Event{}, false
		}
		return ev, ok
	}
	read := r.store.History
	if l, ok := r.store.(latestReader); ok {
		read = l.Latest
	}
	evs, err := read(ctx, lock, scanBack)
	if err != nil {
		r.log.Debug("history: could not read the lock's last events", "lock", lock, "err", err)
		return Event{}, false
	}
	return hopts.LastLease(evs, func(e Event) string { return string(e.Kind) })
}

// leaseReader is a Store that finds the last lease event of a lock's last n
// events without reading them (package etcdstore: from the head it keeps).
type leaseReader interface {
	LastLease(ctx context.Context, lock string, n int) (Event, bool, error)
}

// latestReader is a Store that can read a lock's last events from the end
// of its history, checking less than History does (package localstore):
// enough to find the last lease event, on the path of every acquisition.
type latestReader interface {
	Latest(ctx context.Context, lock string, n int) ([]Event, error)
}

func (r *recorder) remember(id string, h heldLease) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.held) >= maxHeld {
		for k := range r.held {
			delete(r.held, k)
			break
		}
	}
	r.held[id] = h
}

func (r *recorder) forget(id string) (heldLease, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	h, ok := r.held[id]
	delete(r.held, id)
	return h, ok
}
