package postgres

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/internal/coordkit"
)

// Inspect reads one lock.
func (c *coordinator) Inspect(ctx context.Context, name string) (coord.LockInfo, error) {
	if err := coord.ValidateName(name); err != nil {
		return coord.LockInfo{}, err
	}
	st, err := c.one(ctx, c.pool, name)
	if err != nil {
		return coord.LockInfo{}, c.MapErr(ctx, "inspect "+name, err)
	}
	return c.info(st), nil
}

// List reads the locks under prefix that have holders or waiters, and those
// with a limit of their own, in one query (readSQL).
func (c *coordinator) List(ctx context.Context, prefix string) ([]coord.LockInfo, error) {
	sts, limits, err := c.read(ctx, c.pool, prefix, true)
	if err != nil {
		return nil, c.MapErr(ctx, "list", err)
	}
	var infos []coord.LockInfo
	for _, st := range sts {
		if i := c.info(st); i.Held || i.Waiters > 0 {
			infos = append(infos, i)
		}
	}
	infos = coordkit.WithLimited(infos, limits, prefix)
	slices.SortFunc(infos, func(a, b coord.LockInfo) int { return strings.Compare(a.Name, b.Name) })
	return infos, nil
}

// Watch sends the state of each lock under prefix when it changes, as
// NOTIFY tells. A grant's notification names its token: a lease granted
// and ended between two reads of its lock is sent as EventAcquired (with
// the token and holder) before the lock's state after it. When the
// connection breaks, Watch connects again, reads the locks again and sends
// EventReset.
func (c *coordinator) Watch(ctx context.Context, prefix string) (<-chan coord.Event, error) {
	ctx, cancel := c.bound(ctx)
	w := &watch{c: c, prefix: prefix, ch: make(chan coord.Event), shown: map[string]uint64{}}
	if err := w.resync(ctx); err != nil {
		cancel()
		return nil, err
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		defer close(w.ch)
		defer cancel()
		for {
			w.follow(ctx)
			w.conn.Close(context.Background())
			for w.conn = nil; w.conn == nil; _ = w.resync(ctx) { // resync sets conn
				select {
				case <-ctx.Done():
					return
				case <-time.After(reconnectPause):
				}
			}
			if !w.send(ctx, coord.Event{Type: coord.EventReset}) {
				return
			}
		}
	}()
	return w.ch, nil
}

type watch struct {
	c      *coordinator
	prefix string
	ch     chan coord.Event
	conn   *pgx.Conn
	prev   map[string]coord.LockInfo // as last sent
	shown  map[string]uint64         // the largest token sent, by lock
}

// resync listens, then reads the locks.
func (w *watch) resync(ctx context.Context) error {
	conn, err := w.c.listen(ctx, w.c.chWatch, w.c.chLimit)
	if err != nil {
		return w.c.MapErr(ctx, "watch", err)
	}
	infos, err := w.c.List(ctx, w.prefix)
	if err != nil {
		conn.Close(context.Background())
		return err
	}
	w.conn, w.prev = conn, map[string]coord.LockInfo{}
	for _, i := range infos {
		w.prev[i.Name] = i
		w.shown[i.Name] = max(w.shown[i.Name], slices.Max(append(tokens(i), 0)))
	}
	return nil
}

func (w *watch) send(ctx context.Context, ev coord.Event) bool {
	select {
	case w.ch <- ev:
		return true
	case <-ctx.Done():
		return false
	}
}

// update sends the events that lead to i.
func (w *watch) update(ctx context.Context, i coord.LockInfo) bool {
	for _, t := range changes(w.prev[i.Name], i) {
		if !w.send(ctx, coord.Event{Type: t, Info: i}) {
			return false
		}
	}
	w.prev[i.Name] = i
	w.shown[i.Name] = max(w.shown[i.Name], slices.Max(append(tokens(i), 0)))
	if !i.Held && i.Waiters == 0 && i.Limit == nil {
		delete(w.prev, i.Name)
	}
	return true
}

// follow sends the changes until the connection breaks or ctx ends.
func (w *watch) follow(ctx context.Context) {
	for {
		n, err := waitNote(ctx, w.conn, time.Time{})
		if err != nil {
			return
		}
		var names []string
		var grant uint64
		var holder string
		if n.Channel == w.c.chWatch {
			var name string
			if name, grant, holder = parsePayload(n.Payload); !strings.HasPrefix(name, w.prefix) {
				continue
			}
			names = []string{name}
		} else {
			infos, err := w.c.List(ctx, w.prefix)
			if err != nil {
				return
			}
			for _, i := range infos {
				names = append(names, i.Name)
			}
			for name := range w.prev {
				if !slices.Contains(names, name) {
					names = append(names, name)
				}
			}
		}
		for _, name := range names {
			i, err := w.c.Inspect(ctx, name)
			if err != nil {
				return
			}
			if grant > w.shown[name] && !slices.Contains(tokens(i), grant) {
				// Granted and ended before this read: its grant, then its end.
				gone := coord.LockInfo{Name: name, LastToken: grant, Limit: i.Limit}
				coordkit.SetHolders(&gone, 1, []coord.HolderInfo{{Holder: holder, Token: grant}})
				if !w.update(ctx, gone) || !w.update(ctx, coord.LockInfo{Name: name, LastToken: grant, Limit: i.Limit}) {
					return
				}
			}
			if !w.update(ctx, i) {
				return
			}
		}
	}
}

// changes lists the events that lead from a to b.
func changes(a, b coord.LockInfo) []coord.EventType {
	var ts []coord.EventType
	if !sameLimit(a.Limit, b.Limit) {
		ts = append(ts, coord.EventLimit)
	}
	at, bt := tokens(a), tokens(b)
	switch {
	case slices.ContainsFunc(bt, func(t uint64) bool { return !slices.Contains(at, t) }):
		ts = append(ts, coord.EventAcquired)
	case len(bt) < len(at):
		ts = append(ts, coord.EventReleased)
	}
	if a.Waiters != b.Waiters || !slices.Equal(a.Queue, b.Queue) {
		ts = append(ts, coord.EventWaiters)
	}
	return ts
}

func tokens(i coord.LockInfo) []uint64 {
	var ts []uint64
	for _, h := range i.AllHolders() {
		ts = append(ts, h.Token)
	}
	return ts
}

func sameLimit(a, b *coord.Limit) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Name == b.Name && a.Prefix == b.Prefix && a.Max == b.Max && a.Reason == b.Reason && a.By == b.By && a.At.Equal(b.At)
}
