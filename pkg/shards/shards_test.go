package shards_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fence-dev/fence/internal/etcdtest"
	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/coord/etcd"
	"github.com/fence-dev/fence/pkg/coord/local"
	"github.com/fence-dev/fence/pkg/guard"
	"github.com/fence-dev/fence/pkg/guard/etcdstore"
	"github.com/fence-dev/fence/pkg/guard/localstore"
	"github.com/fence-dev/fence/pkg/shards"
)

// backend opens, for each member, a coordinator of its own (as separate
// processes have) and the group's guard store.
type backend struct {
	name  string
	open  func(t *testing.T) coord.Coordinator
	guard func(t *testing.T, c coord.Coordinator) guard.Guard
}

func backends(t *testing.T) []backend {
	dir := t.TempDir()
	var srv *etcdtest.Server
	return []backend{
		{name: "local",
			open: func(t *testing.T) coord.Coordinator {
				c, err := local.Open(dir)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { c.Close() })
				return c
			},
			guard: func(t *testing.T, _ coord.Coordinator) guard.Guard {
				g, err := localstore.Open(dir)
				if err != nil {
					t.Fatal(err)
				}
				return g
			}},
		{name: "etcd",
			open: func(t *testing.T) coord.Coordinator {
				if srv == nil {
					srv = etcdtest.Start(t)
				}
				c, err := etcd.New(context.Background(), srv.Endpoints(), etcd.WithPrefix("/shards/"), etcd.WithDialTimeout(5*time.Second))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { c.Close() })
				return c
			},
			guard: func(t *testing.T, c coord.Coordinator) guard.Guard {
				ec := c.(interface { // the etcd coordinator's
					Client() *clientv3.Client
					Prefix() string
				})
				return etcdstore.New(ec.Client(), ec.Prefix())
			}},
	}
}

// ledger is the work done under the shards: a worker claims a shard when
// its member holds it with a live context, and gives the claim back before
// it releases the shard. Two claims of one shard at once are a violation.
type ledger struct {
	mu         sync.Mutex
	owner      map[int]string
	events     []ledgerEvent
	violations []string
}

type ledgerEvent struct {
	at     time.Time
	shard  int
	member string
	claim  bool
	token  uint64
}

func newLedger() *ledger { return &ledger{owner: map[int]string{}} }

func (l *ledger) claim(shard int, member string, token uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if o, ok := l.owner[shard]; ok && o != member {
		l.violations = append(l.violations, fmt.Sprintf("shard %d claimed by %s while %s works on it", shard, member, o))
	}
	l.owner[shard] = member
	l.events = append(l.events, ledgerEvent{time.Now(), shard, member, true, token})
}

func (l *ledger) unclaim(shard int, member string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.owner[shard] == member {
		delete(l.owner, shard)
	}
	l.events = append(l.events, ledgerEvent{time.Now(), shard, member, false, 0})
}

// snapshot is the claims now: by shard.
func (l *ledger) snapshot() map[int]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return maps(l.owner)
}

func maps(m map[int]string) map[int]string {
	out := make(map[int]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// checkLog replays the event log: per shard, claims and unclaims alternate
// between members, and tokens only grow.
func (l *ledger) checkLog(t *testing.T) int {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	cur := map[int]string{}
	last := map[int]uint64{}
	for _, e := range l.events {
		if e.claim {
			if o, ok := cur[e.shard]; ok && o != e.member {
				t.Errorf("log: shard %d claimed by %s at %v while %s held it", e.shard, e.member, e.at.Format(time.StampMicro), o)
			}
			if e.token <= last[e.shard] {
				t.Errorf("log: shard %d token %d after %d", e.shard, e.token, last[e.shard])
			}
			last[e.shard] = e.token
			cur[e.shard] = e.member
		} else if cur[e.shard] == e.member {
			delete(cur, e.shard)
		}
	}
	for _, v := range l.violations {
		t.Error(v)
	}
	return len(l.events)
}

// worker follows a member: it claims what the member holds and gives up
// (unclaims, then releases) what it must.
func worker(m *shards.Member, l *ledger) (stop func()) {
	done := make(chan struct{})
	quit := make(chan struct{})
	claimed := map[int]*shards.Shard{}
	go func() {
		defer close(done)
		for {
			for _, s := range m.Shards() {
				if s.Context().Err() != nil {
					if claimed[s.Number] == s {
						l.unclaim(s.Number, m.ID())
						delete(claimed, s.Number)
					}
					_ = s.Release(context.Background())
					continue
				}
				if claimed[s.Number] != s {
					l.claim(s.Number, m.ID(), s.Held().Token())
					claimed[s.Number] = s
				}
			}
			select {
			case <-m.Changed():
			case <-quit:
				for n := range claimed {
					l.unclaim(n, m.ID())
				}
				return
			}
		}
	}()
	return func() { close(quit); <-done }
}

type group struct {
	t       *testing.T
	b       backend
	name    string
	n       int
	l       *ledger
	members map[string]*shards.Member
	stops   map[string]func()
	samples int
	opts    shards.Options
}

func (g *group) join(id string) {
	g.t.Helper()
	c := g.b.open(g.t)
	o := g.opts
	o.Shards, o.Member, o.Guard = g.n, id, g.b.guard(g.t, c)
	m, err := shards.Join(context.Background(), c, g.name, g.n, shards.Opts(o))
	if err != nil {
		g.t.Fatal(err)
	}
	g.members[id] = m
	g.stops[id] = worker(m, g.l)
}

func (g *group) leave(id string) {
	g.t.Helper()
	g.stops[id]()
	if err := g.members[id].Leave(context.Background()); err != nil {
		g.t.Error(err)
	}
	delete(g.members, id)
	delete(g.stops, id)
}

func (g *group) ids() []string {
	var out []string
	for id := range g.members {
		out = append(out, id)
	}
	slices.Sort(out)
	return out
}

// settle waits until the claims are the map of the live members under st,
// sampling the claims meanwhile: no sample may show a shard claimed twice
// (the ledger catches that at the claim) or a member over the bound.
func (g *group) settle(st shards.Settings) map[int]string {
	g.t.Helper()
	want := shards.Target(g.n, g.ids(), st)
	deadline := time.Now().Add(30 * time.Second)
	for {
		snap := g.l.snapshot()
		g.samples++
		ok := len(snap) == g.n
		for s, id := range want {
			if snap[s] != id {
				ok = false
			}
		}
		settled := true
		for _, m := range g.members {
			if !m.Settled() {
				settled = false
			}
		}
		if ok && settled {
			// Complete and within one shard of each other.
			count := map[string]int{}
			for _, id := range snap {
				count[id]++
			}
			lo, hi := g.n, 0
			active := 0
			for _, id := range g.ids() {
				if slices.Contains(st.Drained, id) || (st.Serial != nil && count[id] == 0) {
					continue
				}
				active++
				lo, hi = min(lo, count[id]), max(hi, count[id])
			}
			if active > 0 && hi-lo > 1 {
				g.t.Errorf("spread %d..%d over %d members: %v", lo, hi, active, count)
			}
			return snap
		}
		if time.Now().After(deadline) {
			var diag []string
			for _, id := range g.ids() {
				m := g.members[id]
				diag = append(diag, fmt.Sprintf("%s: settled %v, target %v, holds %d", id, m.Settled(), m.Target(), len(m.Shards())))
			}
			for s, id := range want {
				if snap[s] != id {
					diag = append(diag, fmt.Sprintf("shard %d: want %s, claimed by %q", s, id, snap[s]))
				}
			}
			g.t.Fatalf("not settled after 30s: claims %d of %d, members %v, settings %+v:\n%s", len(snap), g.n, g.ids(), st, strings.Join(diag, "\n"))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func moved(a, b map[int]string) int {
	n := 0
	for s, id := range a {
		if b[s] != id {
			n++
		}
	}
	return n
}

// TestGroup: 4 members share 64 shards on both backends; a fifth joins, one
// leaves, one is drained and undrained, the group goes serial and parallel
// again. At every sampled instant and in the whole event log no shard is
// worked on by two members; once settled, the union is complete, the map is
// Target's and the spread within one shard; a join moves only what the map
// moves.
func TestGroup(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			g := &group{t: t, b: b, name: "jobs-" + b.name, n: 64, l: newLedger(),
				members: map[string]*shards.Member{}, stops: map[string]func(){},
				opts: shards.Options{TTL: 3 * time.Second, Settle: 200 * time.Millisecond}}
			for _, id := range []string{"m1", "m2", "m3", "m4"} {
				g.join(id)
			}
			t0 := time.Now()
			before := g.settle(shards.Settings{})
			t.Logf("4 members settled in %v", time.Since(t0).Round(time.Millisecond))

			g.join("m5")
			after := g.settle(shards.Settings{})
			got, least := moved(before, after), len(shards.Of(mapOf(after, g.n), "m5"))
			t.Logf("m5 joined: %d shards moved, %d to m5 (the least possible)", got, least)
			if got*10 > least*16 {
				t.Errorf("join moved %d shards; the new member got %d", got, least)
			}

			g.leave("m2")
			after2 := g.settle(shards.Settings{})
			t.Logf("m2 left: %d shards moved", moved(after, after2))

			ctx := context.Background()
			admin := b.open(t)
			gd := b.guard(t, admin)
			st, err := shards.UpdateSettings(ctx, admin, gd, g.name, 10*time.Second, func(s *shards.Settings) { s.Drained = append(s.Drained, "m3") })
			if err != nil {
				t.Fatal(err)
			}
			drained := g.settle(st)
			if n := len(shards.Of(mapOf(drained, g.n), "m3")); n != 0 {
				t.Errorf("drained m3 still owns %d shards", n)
			}
			one := ""
			st, err = shards.UpdateSettings(ctx, admin, gd, g.name, 10*time.Second, func(s *shards.Settings) { s.Serial = &one })
			if err != nil {
				t.Fatal(err)
			}
			serial := g.settle(st)
			owners := map[string]bool{}
			for _, id := range serial {
				owners[id] = true
			}
			if len(owners) != 1 {
				t.Errorf("serial: %d owners", len(owners))
			}
			st, err = shards.UpdateSettings(ctx, admin, gd, g.name, 10*time.Second, func(s *shards.Settings) { s.Serial = nil; s.Drained = nil })
			if err != nil {
				t.Fatal(err)
			}
			g.settle(st)

			for _, id := range g.ids() {
				g.leave(id)
			}
			n := g.l.checkLog(t)
			t.Logf("invariants held over %d samples and %d claim events", g.samples, n)
		})
	}
}

func mapOf(m map[int]string, n int) []string {
	out := make([]string, n)
	for s, id := range m {
		out[s] = id
	}
	return out
}

func TestMain(m *testing.M) {
	if ep := os.Getenv(frozenHelperEnv); ep != "" {
		os.Exit(frozenHelper(ep))
	}
	os.Exit(m.Run())
}

// TestRevokeShard: `fence revoke GROUP/shard/N` asks the shard's holder to
// stop (coord.StopRequester, as fence revoke does first): the shard's
// context ends at once with ErrRevoked (wrapping coord.ErrStopRequested),
// its worker stops and releases it, the revoker sees the hold end long
// before the lease's TTL, and the map's owner takes it again under a larger
// token. A revoke of the member's own lock makes it leave the group.
func TestRevokeShard(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			g := &group{t: t, b: b, name: "revoke-" + b.name, n: 4, l: newLedger(),
				members: map[string]*shards.Member{}, stops: map[string]func(){},
				opts: shards.Options{TTL: 10 * time.Second, Settle: 100 * time.Millisecond,
					Process: &coord.ProcessInfo{PIDs: []int{os.Getpid()}}}}
			g.join("m1")
			g.settle(shards.Settings{})
			m := g.members["m1"]
			var s1 *shards.Shard
			for _, s := range m.Shards() {
				if s.Number == 1 {
					s1 = s
				}
			}
			admin := b.open(t)
			sr := admin
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			t0 := time.Now()
			if _, asked, err := sr.RequestStop(ctx, shards.ShardLock(g.name, 1), s1.Held().Token()); err != nil || !asked {
				t.Fatalf("RequestStop: asked %v, %v", asked, err)
			}
			select {
			case <-s1.Context().Done():
			case <-time.After(5 * time.Second):
				t.Fatalf("shard 1's context did not end within 5s of the ask (TTL 10s)")
			}
			if c := context.Cause(s1.Context()); !errors.Is(c, shards.ErrRevoked) || !errors.Is(c, coord.ErrStopRequested) {
				t.Fatalf("shard 1's cause: %v", c)
			}
			wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
			defer wcancel()
			if err := sr.WaitEnded(wctx, shards.ShardLock(g.name, 1), s1.Held().Token()); err != nil {
				t.Fatalf("the revoked shard was not released: %v", err)
			}
			t.Logf("%s: shard 1 asked, stopped and released in %v", b.name, time.Since(t0).Round(time.Millisecond))
			after := g.settle(shards.Settings{})
			if after[1] != "m1" {
				t.Fatalf("shard 1 is %q's after the revoke", after[1])
			}
			for _, s := range m.Shards() {
				if s.Number == 1 && s.Held().Token() <= s1.Held().Token() {
					t.Fatalf("shard 1 taken again under token %d, not above %d", s.Held().Token(), s1.Held().Token())
				}
			}

			if _, asked, err := sr.RequestStop(ctx, m.Lease().Name, 0); err != nil || !asked {
				t.Fatalf("RequestStop of the member: asked %v, %v", asked, err)
			}
			select {
			case <-m.Done():
			case <-time.After(5 * time.Second):
				t.Fatalf("the member did not leave within 5s of the ask")
			}
			if err := m.Err(); !errors.Is(err, shards.ErrRevoked) {
				t.Fatalf("the member left with %v", err)
			}
			g.leave("m1")
			g.l.checkLog(t)
		})
	}
}

// TestMovedCauseNamesShard: a shard the map moves away ends with a cause
// that is ErrMoved and names the shard and the group (fence shards run
// gives it as the reason of its restart).
func TestMovedCauseNamesShard(t *testing.T) {
	b := backends(t)[0]
	g := &group{t: t, b: b, name: "moved", n: 4, l: newLedger(),
		members: map[string]*shards.Member{}, stops: map[string]func(){},
		opts: shards.Options{TTL: 10 * time.Second, Settle: 50 * time.Millisecond}}
	g.join("m1")
	g.settle(shards.Settings{})
	before := g.members["m1"].Shards()
	g.join("m2")
	after := g.settle(shards.Settings{})
	n := 0
	for _, s := range before {
		if after[s.Number] != "m2" {
			continue
		}
		n++
		c := context.Cause(s.Context())
		if want := fmt.Sprintf("shard %d of group %q: %v", s.Number, g.name, shards.ErrMoved); !errors.Is(c, shards.ErrMoved) || c.Error() != want {
			t.Errorf("shard %d moved to m2 with cause %q; want %q", s.Number, c, want)
		}
	}
	if n == 0 {
		t.Fatalf("no shard moved to m2: %v", after)
	}
	g.leave("m2")
	g.leave("m1")
}
