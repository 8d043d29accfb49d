package postgres

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fence-dev/fence/pkg/coord"
)

// Inspect reads one lock.
func (c *Coordinator) Inspect(ctx context.Context, name string) (coord.LockInfo, error) {
	if err := coord.ValidateName(name); err != nil {
		return coord.LockInfo{}, err
	}
	return c.inspect(ctx, name)
}

func (c *Coordinator) inspect(ctx context.Context, name string) (coord.LockInfo, error) {
	var info coord.LockInfo
	err := c.tx(ctx, c.pool, "inspect "+name, func(tx pgx.Tx) error {
		st, err := c.load(ctx, tx, name, 0, false)
		if err == nil {
			info = c.info(st)
		}
		return err
	})
	return info, err
}

// Peek is Inspect (coord.Peeker).
func (c *Coordinator) Peek(ctx context.Context, name string) (coord.LockInfo, error) {
	return c.Inspect(ctx, name)
}

// List reads the locks under prefix that have holders or waiters, and those
// with a limit of their own.
func (c *Coordinator) List(ctx context.Context, prefix string) ([]coord.LockInfo, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	rows, err := c.pool.Query(ctx, c.sql(`SELECT name FROM {s}.leases WHERE starts_with(name, $1)
		UNION SELECT name FROM {s}.waiters WHERE starts_with(name, $1)`), prefix)
	if err != nil {
		return nil, c.mapErr(ctx, "list", err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, c.mapErr(ctx, "list", err)
	}
	var infos []coord.LockInfo
	for _, n := range names {
		i, err := c.inspect(ctx, n)
		if err != nil {
			return nil, err
		}
		if i.Held || i.Waiters > 0 {
			infos = append(infos, i)
		}
	}
	var ls []coord.Limit
	err = c.tx(ctx, c.pool, "list", func(tx pgx.Tx) error {
		ls, err = c.limits(ctx, tx, "")
		return err
	})
	if err != nil {
		return nil, err
	}
	infos = coord.WithLimited(infos, ls, prefix)
	slices.SortFunc(infos, func(a, b coord.LockInfo) int { return strings.Compare(a.Name, b.Name) })
	return infos, nil
}

// Watch sends the state of each lock under prefix when it changes, as
// NOTIFY tells.
func (c *Coordinator) Watch(ctx context.Context, prefix string) (<-chan coord.Event, error) {
	ctx, cancel := c.bound(ctx)
	conn, err := c.listen(ctx, c.chWatch, c.chLimit)
	if err != nil {
		cancel()
		return nil, c.mapErr(ctx, "watch", err)
	}
	prev := map[string]coord.LockInfo{}
	infos, err := c.List(ctx, prefix)
	if err != nil {
		cancel()
		conn.Close(context.Background())
		return nil, err
	}
	for _, i := range infos {
		prev[i.Name] = i
	}
	ch := make(chan coord.Event)
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		defer close(ch)
		defer cancel()
		defer conn.Close(context.Background())
		send := func(i coord.LockInfo) bool {
			for _, t := range changes(prev[i.Name], i) {
				select {
				case ch <- coord.Event{Type: t, Info: i}:
				case <-ctx.Done():
					return false
				}
			}
			prev[i.Name] = i
			if !i.Held && i.Waiters == 0 && i.Limit == nil {
				delete(prev, i.Name)
			}
			return true
		}
		for {
			n, err := waitNote(ctx, conn, time.Time{})
			if err != nil {
				return
			}
			var names []string
			if n.Channel == c.chWatch {
				if !strings.HasPrefix(n.Payload, prefix) {
					continue
				}
				names = []string{n.Payload}
			} else {
				infos, err := c.List(ctx, prefix)
				if err != nil {
					return
				}
				for _, i := range infos {
					names = append(names, i.Name)
				}
				for name := range prev {
					if !slices.Contains(names, name) {
						names = append(names, name)
					}
				}
			}
			for _, name := range names {
				i, err := c.inspect(ctx, name)
				if err != nil || !send(i) {
					return
				}
			}
		}
	}()
	return ch, nil
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
