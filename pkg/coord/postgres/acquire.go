package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/internal/coordkit"
)

// Acquire takes a lease on name: at once when the lock has room and nobody
// waits, else (opts.Wait) in the queue.
func (c *coordinator) Acquire(ctx context.Context, name string, opts coord.AcquireOptions) (*coord.Lease, error) {
	start := time.Now()
	opts, err := coordkit.CheckAcquire(name, opts)
	if err != nil {
		return nil, err
	}
	if l, err := c.grantIdle(ctx, name, opts); l != nil || err != nil {
		return l, err
	}
	if opts.Wait != 0 { // the queue's first try decides as try(me=0) would
		return c.wait(ctx, name, opts, start)
	}
	l, st, err := c.try(ctx, c.pool, name, opts, 0)
	if l != nil || err != nil {
		return l, err
	}
	return nil, busy(st, opts)
}

// busy is the error of an Acquire that did not get the lock.
func busy(st *state, opts coord.AcquireOptions) error {
	lim := coordkit.EffectiveLimit(st.limits, st.name)
	if lim != nil && len(st.holders)+len(st.waiters) >= lim.Max {
		return &coordkit.LimitError{Lock: st.name, Limit: *lim, Holders: len(st.holders)}
	}
	if len(st.holders) > 0 {
		h := st.holders[0]
		return fmt.Errorf("%w: lock %q is held by %s (token %d)", coord.ErrBusy, st.name, h.holder, h.token)
	}
	return fmt.Errorf("%w: lock %q has %d waiter(s) ahead", coord.ErrBusy, st.name, len(st.waiters))
}

// grantIdle grants a lease in one statement when the lock is idle (no
// lease, no waiter, no limit: see grant_idle in the schema); nil, nil when
// it is not, and try decides.
func (c *coordinator) grantIdle(ctx context.Context, name string, opts coord.AcquireOptions) (*coord.Lease, error) {
	id, rvn, sent := random(), random(), time.Now()
	var token int64
	var at time.Time
	err := c.pool.QueryRow(ctx, c.SQL("SELECT g_token, g_at FROM {s}.grant_idle($1, $2, $3, $4, $5, $6, $7, $8, $9)"),
		name, opts.Holder, coordkit.SlotsOf(opts.Slots), opts.TTL.Milliseconds(), id, rvn, processJSON(opts), c.chLock(name), c.chWatch).Scan(&token, &at)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, c.MapErr(ctx, "acquire", err)
	}
	return &coord.Lease{Name: name, Holder: opts.Holder, Token: uint64(token), ID: formatID(id),
		TTL: opts.TTL.Truncate(time.Millisecond), AcquiredAt: at, Sent: sent}, nil
}

// decide is try's decision on st for the caller at place me in the queue
// (0: none) asking for slots: grant when the lock has room and no waiter is
// ahead, else wait (queued says whether me is in the queue already), or an
// error when the lock is in use with other slots than the caller's or has
// issued its last token. It sets st.room, how many may hold the lock now.
func decide(st *state, me int64, slots int) (grant, queued bool, err error) {
	ahead, others := 0, 0
	for _, w := range st.waiters {
		switch {
		case w.seq == me:
			queued = true
		case me == 0 || w.seq < me:
			ahead++
			others++
		default:
			others++
		}
	}
	st.room = slots
	if lim := coordkit.EffectiveLimit(st.limits, st.name); lim != nil {
		st.room = min(st.room, lim.Max)
	}
	switch {
	case (len(st.holders) > 0 || others > 0) && st.slots != slots:
		return false, queued, &coordkit.SlotsError{Lock: st.name, Have: st.slots, Want: slots}
	case len(st.holders) >= st.room || ahead > 0: // the head first: tokens in queue order
		return false, queued, nil
	case st.last >= coord.MaxToken:
		return false, queued, fmt.Errorf("%w: lock %q has issued its last fencing token (%d, the largest a signed 64-bit integer holds); tokens never wrap: use another lock name",
			coord.ErrUnavailable, st.name, st.last)
	}
	return true, queued, nil
}

// try grants a lease when the lock has room for it and no waiter is ahead
// (me is the caller's place in the queue, 0 when it has none). A caller
// with a place that is not granted is in the queue when try returns (it
// joins it if need be).
func (c *coordinator) try(ctx context.Context, q beginner, name string, opts coord.AcquireOptions, me int64) (*coord.Lease, *state, error) {
	var l *coord.Lease
	var st *state
	sent := time.Now()
	err := c.tx(ctx, q, "acquire", func(tx pgx.Tx) error {
		l = nil
		var err error
		if st, err = c.load(ctx, tx, name, me); err != nil {
			return err
		}
		slots := coordkit.SlotsOf(opts.Slots)
		grant, queued, err := decide(st, me, slots)
		switch {
		case err != nil:
			return err
		case grant:
			l, err = c.grant(ctx, tx, st, opts, me, queued, sent)
			return err
		case me != 0 && !queued:
			return c.join(ctx, tx, st, opts.Holder, me, slots)
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	return l, st, nil
}

// join puts the caller, at place me, in the queue of st's lock.
func (c *coordinator) join(ctx context.Context, tx pgx.Tx, st *state, holder string, me int64, slots int) error {
	if _, err := tx.Exec(ctx, c.SQL(`WITH w AS (INSERT INTO {s}.waiters (seq, name, holder, slots) VALUES ($1, $2, $3, $4))
		UPDATE {s}.locks SET slots = $4 WHERE name = $2`), me, st.name, holder, slots); err != nil {
		return err
	}
	st.waiters = append(st.waiters, waiter{seq: me, holder: holder, slots: slots, since: time.Now()})
	_, err := c.notify(ctx, tx, st.name, "j", "")
	return err
}

// grant writes, in one statement, the lease of the caller (at place me,
// queued or not: it leaves the queue) with the lock's next token, in its
// first free slot, and announces it (notify).
func (c *coordinator) grant(ctx context.Context, tx pgx.Tx, st *state, opts coord.AcquireOptions, me int64, queued bool, sent time.Time) (*coord.Lease, error) {
	name, token, slot, id := st.name, st.last+1, freeSlot(st.holders), random()
	note := "c"
	if queued {
		note = fmt.Sprintf("g %d", me)
	}
	var at time.Time
	err := tx.QueryRow(ctx, c.SQL(`WITH k AS (UPDATE {s}.locks SET last_token = $4, slots = $10 WHERE name = $2),
		w AS (DELETE FROM {s}.waiters WHERE seq = $11),
		l AS (INSERT INTO {s}.leases (id, name, holder, token, slot, ttl_ms, rvn, supervised, process)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) RETURNING acquired_at)
		SELECT acquired_at, pg_notify($12, $13), pg_notify($14, $15) FROM l`),
		id, name, opts.Holder, token, slot, opts.TTL.Milliseconds(), random(), opts.Process != nil, processJSON(opts),
		coordkit.SlotsOf(opts.Slots), me, c.chLock(name), note, c.chWatch, watchPayload(name, token, opts.Holder)).Scan(&at, nil, nil)
	if err != nil {
		return nil, err
	}
	return &coord.Lease{Name: name, Holder: opts.Holder, Token: uint64(token), ID: formatID(id),
		TTL: opts.TTL.Truncate(time.Millisecond), AcquiredAt: at, Sent: sent, Slot: slot}, nil
}

// freeSlot is the first slot no holder has.
func freeSlot(hs []lease) int {
	slot := 0
	for slices.ContainsFunc(hs, func(h lease) bool { return h.slot == slot }) {
		slot++
	}
	return slot
}

// processJSON is the process column of a grant (nil when unsupervised).
func processJSON(opts coord.AcquireOptions) []byte {
	if opts.Process == nil {
		return nil
	}
	b, _ := json.Marshal(opts.Process)
	return b
}

// wait queues for name on a connection of its own that LISTENs (see the
// package doc: Waiting). A connection that breaks (the database
// restarted, the network cut) does not end the wait: the waiter connects
// again every quarter second within its budget and queues again.
func (c *coordinator) wait(ctx context.Context, name string, opts coord.AcquireOptions, start time.Time) (*coord.Lease, error) {
	ctx, cancel := c.bound(ctx)
	defer cancel()
	var deadline time.Time
	if opts.Wait > 0 {
		deadline = start.Add(opts.Wait)
	}
	for {
		l, err := c.queue(ctx, name, &opts, deadline)
		var lost lostError
		if !errors.As(err, &lost) {
			return l, err
		}
		if !deadline.IsZero() && !time.Now().Add(reconnectPause).Before(deadline) {
			return nil, c.MapErr(ctx, fmt.Sprintf("acquire %q (after waiting %v)", name, opts.Wait), lost.error)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("acquire %q: %w", name, ctx.Err())
		case <-time.After(reconnectPause):
		}
	}
}

// reconnectPause is the pause between attempts to connect again;
// queryTimeout bounds a waiter's query.
const (
	reconnectPause = 250 * time.Millisecond
	stallPause     = 250 * time.Millisecond
	queryTimeout   = 10 * time.Second
)

// lostError is a connection that broke or could not be made: a waiter
// connects again.
type lostError struct{ error }

// lostConn wraps err as lost when conn is gone.
func lostConn(conn *pgx.Conn, err error) error {
	if err != nil && conn.IsClosed() {
		return lostError{err}
	}
	return err
}

// queue is one connection's part of wait: on a connection of its own that
// listens on the channels of lock name and holds the advisory lock of a new
// place me, it takes that place in the queue and waits there until granted,
// the deadline, or the connection breaks (then a lostError). opts.OnWait is
// called once, and then cleared.
func (c *coordinator) queue(ctx context.Context, name string, opts *coord.AcquireOptions, deadline time.Time) (*coord.Lease, error) {
	cctx := ctx
	if !deadline.IsZero() {
		var cancel context.CancelFunc
		cctx, cancel = context.WithDeadline(ctx, deadline)
		defer cancel()
	}
	conn, err := c.listen(cctx, c.chLock(name), c.chLimit)
	if err != nil {
		if ctx.Err() != nil || c.check() != nil {
			return nil, c.MapErr(ctx, "acquire "+name, err)
		}
		return nil, lostError{err}
	}
	spare := false // a connection granted its lease is kept for the next wait
	defer func() {
		if !spare || !c.putSpare(conn) {
			conn.Close(context.Background())
		}
	}()
	var me int64
	if err := conn.QueryRow(ctx, c.SQL("SELECT s, pg_advisory_lock($1, (s % 2147483647)::int)::text FROM nextval('{s}.waiter_seq') s"), c.class).Scan(&me, nil); err != nil {
		return nil, lostConn(conn, c.MapErr(ctx, "acquire "+name, err))
	}
	for {
		tctx, tcancel := context.WithTimeout(ctx, queryTimeout) // a cut network breaks the connection
		l, st, err := c.try(tctx, conn, name, *opts, me)
		tcancel()
		err = lostConn(conn, err)
		if err == nil && l == nil {
			if opts.OnWait != nil {
				opts.OnWait(c.info(st))
				opts.OnWait = nil
			}
			err = c.await(ctx, conn, st, me, *opts, deadline)
		}
		if err != nil {
			c.leave(conn, name, me)
			return nil, err
		}
		if l != nil {
			spare = true
			return l, nil
		}
	}
}

// await waits, at place me in the queue of st's lock, for what makes
// another try worth its query (see turn.on): nil then, else why the wait
// ended.
func (c *coordinator) await(ctx context.Context, conn *pgx.Conn, st *state, me int64, opts coord.AcquireOptions, deadline time.Time) error {
	t := newTurn(st, me, deadline, time.Now())
	chl, pid := c.chLock(st.name), conn.PgConn().PID()
	for {
		n, err := waitNote(ctx, conn, t.until())
		if ctx.Err() != nil {
			return fmt.Errorf("acquire %q: %w", st.name, ctx.Err())
		}
		if err != nil {
			return lostConn(conn, c.MapErr(ctx, "acquire "+st.name, err))
		}
		nt, now := parseNote(n, chl, pid), time.Now()
		switch t.on(nt, now) {
		case actTry:
			return nil
		case actBusy:
			return fmt.Errorf("%w (after waiting %v)", busy(st, opts), opts.Wait)
		case actRenewed: // its new rvn starts the count again, no query
			for i, h := range st.holders {
				if h.id == nt.id {
					_, st.holders[i].end = c.observe(st.name, h.id, nt.rvn, h.ttl, now)
				}
			}
			t.renewed(st.holders)
		}
	}
}

// leave takes place me out of the queue and tells the others.
func (c *coordinator) leave(conn *pgx.Conn, name string, me int64) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, _ = c.notify(ctx, conn, name, fmt.Sprintf("l %d", me), "DELETE FROM {s}.waiters WHERE seq = $1", me)
}

// listen is a connection of its own that listens on chans: the spare one
// when there is one, else a new one.
func (c *coordinator) listen(ctx context.Context, chans ...string) (*pgx.Conn, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	var q strings.Builder
	for _, ch := range chans {
		q.WriteString("LISTEN " + pgx.Identifier{ch}.Sanitize() + ";")
	}
	c.mu.Lock()
	conn := c.spare
	c.spare = nil
	fresh := time.Since(c.spareAt) < spareIdle
	c.mu.Unlock()
	if conn != nil {
		if fresh {
			if _, err := conn.Exec(ctx, q.String()); err == nil {
				return conn, nil
			}
		}
		conn.Close(context.Background()) // broken or idle too long: a new one
	}
	conn, err := pgx.ConnectConfig(ctx, c.connCfg)
	if err != nil {
		return nil, err
	}
	if _, err := conn.Exec(ctx, q.String()); err != nil {
		conn.Close(context.Background())
		return nil, err
	}
	return conn, nil
}

// spareIdle is how long a spare connection is kept unused.
const spareIdle = time.Minute

// putSpare keeps conn, a waiter's connection, for the next wait, once it
// listens to nothing and holds no advisory lock; false when it cannot
// (then the caller closes it).
func (c *coordinator) putSpare(conn *pgx.Conn) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if c.check() != nil {
		return false
	}
	if _, err := conn.Exec(ctx, "UNLISTEN *; SELECT pg_advisory_unlock_all()"); err != nil {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.spare != nil || c.check() != nil {
		return false
	}
	c.spare, c.spareAt = conn, time.Now()
	return true
}

// waitNote waits for a notification until until (zero: for ever); nil, nil
// when until came first.
func waitNote(ctx context.Context, conn *pgx.Conn, until time.Time) (*pgconn.Notification, error) {
	wctx := ctx
	if !until.IsZero() {
		var cancel context.CancelFunc
		wctx, cancel = context.WithDeadline(ctx, until)
		defer cancel()
	}
	n, err := conn.WaitForNotification(wctx)
	if err != nil && ctx.Err() == nil && wctx.Err() != nil {
		return nil, nil
	}
	return n, err
}

// bound is ctx, also ended when the coordinator is closed.
func (c *coordinator) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(c.closed, cancel)
	return ctx, func() { stop(); cancel() }
}
