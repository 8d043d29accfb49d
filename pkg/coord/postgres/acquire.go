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
func (c *Coordinator) Acquire(ctx context.Context, name string, opts coord.AcquireOptions) (*coord.Lease, error) {
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
func (c *Coordinator) grantIdle(ctx context.Context, name string, opts coord.AcquireOptions) (*coord.Lease, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	id, rvn, sent := random(), random(), time.Now()
	var proc []byte
	if opts.Process != nil {
		proc, _ = json.Marshal(opts.Process)
	}
	var token int64
	var at time.Time
	err := c.pool.QueryRow(ctx, c.sql("SELECT g_token, g_at FROM {s}.grant_idle($1, $2, $3, $4, $5, $6, $7, $8, $9)"),
		name, opts.Holder, coordkit.SlotsOf(opts.Slots), opts.TTL.Milliseconds(), id, rvn, proc, c.chLock(name), c.chWatch).Scan(&token, &at)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, c.mapErr(ctx, "acquire", err)
	}
	return &coord.Lease{Name: name, Holder: opts.Holder, Token: uint64(token), ID: formatID(id),
		TTL: opts.TTL.Truncate(time.Millisecond), AcquiredAt: at, Sent: sent}, nil
}

// try grants a lease when the lock has room for it and no waiter is ahead
// (me is the caller's place in the queue, 0 when it has none). A queued
// caller that is not granted is (again) in the queue when try returns.
func (c *Coordinator) try(ctx context.Context, q beginner, name string, opts coord.AcquireOptions, me int64) (*coord.Lease, *state, error) {
	var l *coord.Lease
	var st *state
	sent := time.Now()
	err := c.tx(ctx, q, "acquire", func(tx pgx.Tx) error {
		l = nil
		var err error
		if st, err = c.load(ctx, tx, name, me, true); err != nil {
			return err
		}
		slots := coordkit.SlotsOf(opts.Slots)
		ahead, queued, others := 0, false, 0
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
		idle := len(st.holders) == 0 && others == 0
		if !idle && st.slots != slots {
			return &coordkit.SlotsError{Lock: name, Have: st.slots, Want: slots}
		}
		room := slots
		if lim := coordkit.EffectiveLimit(st.limits, name); lim != nil {
			room = min(room, lim.Max)
		}
		st.room = room
		if len(st.holders) >= room || ahead > 0 { // the head first: tokens in queue order
			if me == 0 || queued {
				return nil
			}
			if _, err := tx.Exec(ctx, c.sql("INSERT INTO {s}.waiters (seq, name, holder, slots) VALUES ($1, $2, $3, $4)"), me, name, opts.Holder, slots); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, c.sql("UPDATE {s}.locks SET slots = $2 WHERE name = $1"), name, slots); err != nil {
				return err
			}
			st.waiters = append(st.waiters, waiter{seq: me, holder: opts.Holder, slots: slots, since: time.Now()})
			return c.notify(ctx, tx, name, 0, "", "j")
		}
		if st.last >= coord.MaxToken {
			return fmt.Errorf("%w: lock %q has issued its last fencing token (%d, the largest a signed 64-bit integer holds); tokens never wrap: use another lock name",
				coord.ErrUnavailable, name, st.last)
		}
		slot := 0
		for slices.ContainsFunc(st.holders, func(h lease) bool { return h.slot == slot }) {
			slot++
		}
		id, rvn := random(), random()
		var proc []byte
		if opts.Process != nil {
			proc, _ = json.Marshal(opts.Process)
		}
		var at time.Time
		if _, err := tx.Exec(ctx, c.sql("UPDATE {s}.locks SET last_token = $2, slots = $3 WHERE name = $1"), name, st.last+1, slots); err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, c.sql(`INSERT INTO {s}.leases (id, name, holder, token, slot, ttl_ms, rvn, supervised, process)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) RETURNING acquired_at`),
			id, name, opts.Holder, st.last+1, slot, opts.TTL.Milliseconds(), rvn, opts.Process != nil, proc).Scan(&at); err != nil {
			return err
		}
		if queued {
			if _, err := tx.Exec(ctx, c.sql("DELETE FROM {s}.waiters WHERE seq = $1"), me); err != nil {
				return err
			}
		}
		l = &coord.Lease{Name: name, Holder: opts.Holder, Token: uint64(st.last + 1), ID: formatID(id),
			TTL: opts.TTL.Truncate(time.Millisecond), AcquiredAt: at, Sent: sent, Slot: slot}
		note := "c"
		if queued {
			note = fmt.Sprintf("g %d", me)
		}
		return c.notify(ctx, tx, name, st.last+1, opts.Holder, note)
	})
	if err != nil {
		return nil, nil, err
	}
	return l, st, nil
}

// wait queues for name on a connection of its own that LISTENs, and tries
// again when notified of a change, when a holder's lease has gone a TTL
// unrenewed, or when the wait ends. A connection that breaks (the database
// restarted, the network cut) does not end the wait: the waiter connects
// again every quarter second within its budget and queues again.
func (c *Coordinator) wait(ctx context.Context, name string, opts coord.AcquireOptions, start time.Time) (*coord.Lease, error) {
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
			return nil, c.mapErr(ctx, fmt.Sprintf("acquire %q (after waiting %v)", name, opts.Wait), lost.error)
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

// queue is one connection's part of wait: it takes a place in the queue and
// waits there until granted, the deadline, or the connection breaks (then a
// lostError). opts.OnWait is called once, and then cleared.
func (c *Coordinator) queue(ctx context.Context, name string, opts *coord.AcquireOptions, deadline time.Time) (*coord.Lease, error) {
	cctx := ctx
	if !deadline.IsZero() {
		var cancel context.CancelFunc
		cctx, cancel = context.WithDeadline(ctx, deadline)
		defer cancel()
	}
	chl := c.chLock(name)
	conn, err := c.listen(cctx, chl, c.chLimit)
	if err != nil {
		if ctx.Err() != nil || c.check() != nil {
			return nil, c.mapErr(ctx, "acquire "+name, err)
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
	if err := conn.QueryRow(ctx, c.sql("SELECT s, pg_advisory_lock($1, (s % 2147483647)::int)::text FROM nextval('{s}.waiter_seq') s"), c.class).Scan(&me, nil); err != nil {
		return nil, lostConn(conn, c.mapErr(ctx, "acquire "+name, err))
	}
	pid := conn.PgConn().PID()
	for {
		tctx, tcancel := context.WithTimeout(ctx, queryTimeout) // a cut network breaks the connection
		l, st, err := c.try(tctx, conn, name, *opts, me)
		tcancel()
		if l != nil || err != nil {
			if err != nil {
				c.leave(conn, name, me)
			}
			spare = err == nil
			return l, lostConn(conn, err)
		}
		if opts.OnWait != nil {
			opts.OnWait(c.info(st))
			opts.OnWait = nil
		}
		next := time.Time{}
		for _, h := range st.holders {
			if next.IsZero() || h.end.Before(next) {
				next = h.end
			}
		}
		if len(st.holders) < st.room && (next.IsZero() || time.Until(next) > 250*time.Millisecond) {
			next = time.Now().Add(250 * time.Millisecond) // room, but a waiter ahead has not taken it yet
		}
		// The waiters ahead: while one is, a release is theirs to take and
		// their grants and leavings are counted here without a query,
		// unless nobody takes a freed lease within stallPause.
		ahead := map[int64]bool{}
		for _, w := range st.waiters {
			if w.seq < me {
				ahead[w.seq] = true
			}
		}
		var stall time.Time
	wait:
		for {
			until := next
			if !stall.IsZero() && (until.IsZero() || stall.Before(until)) {
				until = stall
			}
			if !deadline.IsZero() && (until.IsZero() || deadline.Before(until)) {
				until = deadline
			}
			n, err := waitNote(ctx, conn, until)
			switch {
			case ctx.Err() != nil:
				c.leave(conn, name, me)
				return nil, fmt.Errorf("acquire %q: %w", name, ctx.Err())
			case err != nil:
				c.leave(conn, name, me)
				return nil, lostConn(conn, c.mapErr(ctx, "acquire "+name, err))
			case n == nil && !deadline.IsZero() && !time.Now().Before(deadline):
				c.leave(conn, name, me)
				return nil, fmt.Errorf("%w (after waiting %v)", busy(st, *opts), opts.Wait)
			case n == nil:
				break wait
			case n.Channel != chl:
				break wait // a limit changed
			case n.PID == pid || n.Payload == "j":
			case len(ahead) > 0 && (strings.HasPrefix(n.Payload, "g ") || strings.HasPrefix(n.Payload, "l ")):
				var seq int64
				fmt.Sscanf(n.Payload[2:], "%d", &seq)
				if ahead[seq] {
					delete(ahead, seq)
					stall = time.Time{}
				}
				if len(ahead) == 0 {
					break wait
				}
			case len(ahead) > 0 && n.Payload == "f":
				if stall.IsZero() {
					stall = time.Now().Add(stallPause)
				}
			case strings.HasPrefix(n.Payload, "r "):
				// A renewal: its new rvn starts the count again, no query.
				var id, rvn int64
				fmt.Sscanf(n.Payload, "r %d %d", &id, &rvn)
				for i, h := range st.holders {
					if h.id == id {
						_, st.holders[i].end = c.observe(name, id, rvn, h.ttl, time.Now())
					}
				}
				if len(st.holders) > 0 {
					next = st.holders[0].end
					for _, h := range st.holders {
						next = minTime(next, h.end)
					}
				}
			default:
				break wait
			}
		}
	}
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// leave takes place me out of the queue and tells the others.
func (c *Coordinator) leave(conn *pgx.Conn, name string, me int64) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, c.sql("DELETE FROM {s}.waiters WHERE seq = $1"), me)
		if err != nil || tag.RowsAffected() == 0 {
			return err
		}
		return c.notify(ctx, tx, name, 0, "", fmt.Sprintf("l %d", me))
	})
}

// listen is a connection of its own that listens on chans: the spare one
// when there is one, else a new one.
func (c *Coordinator) listen(ctx context.Context, chans ...string) (*pgx.Conn, error) {
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
func (c *Coordinator) putSpare(conn *pgx.Conn) bool {
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
func (c *Coordinator) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		select {
		case <-c.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}
