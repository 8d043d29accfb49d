package etcdproc

import (
	"context"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// A LeaderWatch samples, every period, which leader each member of a
// cluster names (by a Status call straight to the member, past its
// proxies), and keeps the instants at which a majority of the members named
// one and the same leader: the cluster could then serve a lease renewal.
// A frozen member, or one that does not answer within the period, names
// none; a partitioned old leader that still names itself is one of three.
type LeaderWatch struct {
	every time.Duration
	n     int
	stop  chan struct{}
	done  chan struct{}

	mu      sync.Mutex
	samples []leaderSample
}

type leaderSample struct {
	at  time.Time
	led bool // a majority named one leader
	// The leader a majority named, and the highest term its voters
	// reported (a re-election of the same member is a new leadership).
	leader, term uint64
}

// WatchLeader starts a LeaderWatch on c, sampling every period.
func (c *Cluster) WatchLeader(every time.Duration) *LeaderWatch {
	w := &LeaderWatch{every: every, n: len(c.Members), stop: make(chan struct{}), done: make(chan struct{})}
	var clis []*clientv3.Client
	for _, m := range c.Members {
		cli, err := clientv3.New(clientv3.Config{Endpoints: []string{m.client}, DialTimeout: time.Second, Logger: zap.NewNop()})
		if err != nil {
			continue // it names no leader
		}
		clis = append(clis, cli)
	}
	go func() {
		defer close(w.done)
		defer func() {
			for _, cli := range clis {
				cli.Close()
			}
		}()
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			w.sample(clis)
			select {
			case <-t.C:
			case <-w.stop:
				return
			}
		}
	}()
	return w
}

func (w *LeaderWatch) sample(clis []*clientv3.Client) {
	at := time.Now()
	leaders := make([]uint64, len(clis))
	terms := make([]uint64, len(clis))
	var wg sync.WaitGroup
	for i, cli := range clis {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), w.every)
			defer cancel()
			if st, err := cli.Status(ctx, cli.Endpoints()[0]); err == nil {
				leaders[i], terms[i] = st.Leader, st.RaftTerm
			}
		})
	}
	wg.Wait()
	votes := map[uint64]int{}
	s := leaderSample{at: at}
	for _, l := range leaders {
		if l != 0 {
			votes[l]++
			if votes[l] > w.n/2 {
				s.led, s.leader = true, l
			}
		}
	}
	for i, l := range leaders {
		if s.led && l == s.leader {
			s.term = max(s.term, terms[i])
		}
	}
	w.mu.Lock()
	w.samples = append(w.samples, s)
	w.mu.Unlock()
}

// Stop ends the sampling.
func (w *LeaderWatch) Stop() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.done
}

// LongestLed is the longest stretch of [from, to] through which the
// cluster had a leader named by a majority at every sample (a stretch of
// samples runs from its first to one period after its last).
func (w *LeaderWatch) LongestLed(from, to time.Time) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	var best time.Duration
	var begin time.Time
	flush := func(end time.Time) {
		if begin.IsZero() {
			return
		}
		b, e := begin, end
		if b.Before(from) {
			b = from
		}
		if e.After(to) {
			e = to
		}
		if d := e.Sub(b); d > best {
			best = d
		}
		begin = time.Time{}
	}
	for i, s := range w.samples {
		if !s.led {
			flush(s.at)
			continue
		}
		if begin.IsZero() {
			begin = s.at
		}
		if i == len(w.samples)-1 {
			flush(s.at.Add(w.every))
		}
	}
	return best
}

// LedSince returns when the leadership the cluster had at at began: the
// first of the samples up to at through which a majority named the same
// leader in the same term, with no sample between them that lacked one.
// ok is false when the last sample at or before at had no majority leader.
func (w *LeaderWatch) LedSince(at time.Time) (since time.Time, ok bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	i := len(w.samples) - 1
	for i >= 0 && w.samples[i].at.After(at) {
		i--
	}
	if i < 0 || !w.samples[i].led {
		return time.Time{}, false
	}
	cur := w.samples[i]
	for i > 0 {
		p := w.samples[i-1]
		if !p.led || p.leader != cur.leader || p.term != cur.term {
			break
		}
		i--
	}
	return w.samples[i].at, true
}
