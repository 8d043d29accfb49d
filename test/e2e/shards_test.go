package e2e

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fence-dev/fence/internal/proc"
	"github.com/fence-dev/fence/pkg/clock"
	"github.com/fence-dev/fence/pkg/shards"
)

// shardStart is e2ehelper shard's start record (see its doc).
type shardStart struct {
	Member string         `json:"member"`
	ID     proc.ID        `json:"id"`
	T      clock.Boot     `json:"t"`
	Tokens map[int]uint64 `json:"tokens"`
}

// shardCmd is one run of a member's command, as the observer saw it.
type shardCmd struct {
	shardStart
	base string     // its records' path without the suffix
	died clock.Boot // 0 while it lives
}

// observer follows the commands of a group's members through their start
// records and pidfds. At every sample no shard may be in the sets of two
// running commands; the log (each command's start, on the boot clock, to
// its death) is checked at the end: per shard, no two commands' lives
// overlap, and tokens grow. A command that is frozen (stopped) does not
// count as working in a sample; commands of members in exempt are left out
// of both checks (the frozen member of TestShardsFrozen, resumed on etcd
// after its successor took its shards: its late writes the store must
// refuse instead).
type observer struct {
	t    *testing.T
	dir  string
	quit chan struct{}
	done chan struct{}

	mu         sync.Mutex
	cmds       map[string]*shardCmd
	samples    int
	violations []string
	exempt     map[string]bool
}

func newObserver(t *testing.T) *observer {
	o := &observer{t: t, dir: t.TempDir(), quit: make(chan struct{}), done: make(chan struct{}),
		cmds: map[string]*shardCmd{}, exempt: map[string]bool{}}
	go o.run()
	t.Cleanup(o.stop)
	return o
}

func (o *observer) stop() {
	select {
	case <-o.quit:
	default:
		close(o.quit)
	}
	<-o.done
}

func (o *observer) run() {
	defer close(o.done)
	for {
		o.scan()
		o.sample()
		select {
		case <-o.quit:
			return
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// scan picks up new start records and follows each command's death.
func (o *observer) scan() {
	names, _ := filepath.Glob(filepath.Join(o.dir, "*.start"))
	for _, name := range names {
		base := strings.TrimSuffix(name, ".start")
		o.mu.Lock()
		_, known := o.cmds[base]
		o.mu.Unlock()
		if known {
			continue
		}
		b, err := os.ReadFile(name)
		var c shardCmd
		if err != nil || json.Unmarshal(b, &c.shardStart) != nil {
			continue
		}
		c.base = base
		fd, err := unix.PidfdOpen(c.ID.PID, 0)
		if st, serr := proc.ReadStat(c.ID.PID); err != nil || serr != nil || st.Start != c.ID.Start {
			// Gone before it was seen: its death is before now (a bound
			// later than the truth, so it can only add overlap).
			c.died = clock.Now()
			if err == nil {
				unix.Close(fd)
			}
		} else {
			go func(c *shardCmd) {
				defer unix.Close(fd)
				fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
				for {
					n, err := unix.Poll(fds, -1)
					if errors.Is(err, unix.EINTR) {
						continue
					}
					if n > 0 || err != nil {
						now := clock.Now()
						o.mu.Lock()
						c.died = now
						o.mu.Unlock()
						return
					}
				}
			}(&c)
		}
		o.mu.Lock()
		o.cmds[base] = &c
		o.mu.Unlock()
	}
}

func (o *observer) sample() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.samples++
	owner := map[int]string{}
	for _, c := range o.cmds {
		if c.died != 0 || o.exempt[c.Member] || proc.Check(c.ID) != proc.Running {
			continue
		}
		for n := range c.Tokens {
			if other, ok := owner[n]; ok && len(o.violations) < 20 {
				o.violations = append(o.violations, fmt.Sprintf("sample %d: shard %d in the sets of running commands of %s and %s", o.samples, n, other, c.Member))
			}
			owner[n] = c.Member
		}
	}
}

// live returns the newest command of each member that still lives.
func (o *observer) live() map[string]*shardCmd {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := map[string]*shardCmd{}
	for _, c := range o.cmds {
		if c.died == 0 && (out[c.Member] == nil || c.T > out[c.Member].T) {
			out[c.Member] = c
		}
	}
	return out
}

// check verifies the log and the samples and returns the counts.
func (o *observer) check() (samples, runs int) {
	o.t.Helper()
	o.scan()
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, v := range o.violations {
		o.t.Error(v)
	}
	type life struct {
		member   string
		from, to clock.Boot
		token    uint64
	}
	by := map[int][]life{}
	for _, c := range o.cmds {
		if o.exempt[c.Member] {
			continue
		}
		to := c.died
		if to == 0 {
			to = clock.Now()
		}
		for n, tok := range c.Tokens {
			by[n] = append(by[n], life{c.Member, c.T, to, tok})
		}
		if b, err := os.ReadFile(c.base + ".first"); err == nil {
			var w map[int]string
			if json.Unmarshal(b, &w) == nil {
				for n, r := range w {
					if r != "ok" {
						o.t.Errorf("%s's command (token %d) could not write shard %d: %s", c.Member, c.Tokens[n], n, r)
					}
				}
			}
		}
	}
	for n, ls := range by {
		sort.Slice(ls, func(i, j int) bool { return ls[i].from < ls[j].from })
		for i := 1; i < len(ls); i++ {
			if ls[i].from < ls[i-1].to {
				o.t.Errorf("log: shard %d: %s's command (token %d) started %v before %s's (token %d) died",
					n, ls[i].member, ls[i].token, ls[i-1].to.Sub(ls[i].from), ls[i-1].member, ls[i-1].token)
			}
			if ls[i].token < ls[i-1].token || (ls[i].token == ls[i-1].token && ls[i].member != ls[i-1].member) {
				o.t.Errorf("log: shard %d: token %d (%s) after %d (%s)", n, ls[i].token, ls[i].member, ls[i-1].token, ls[i-1].member)
			}
		}
	}
	return o.samples, len(o.cmds)
}

// shardGroup is a group of `fence shards run` processes.
type shardGroup struct {
	t       *testing.T
	env     []string
	name    string
	n       int
	ttl     time.Duration
	settle  time.Duration
	obs     *observer
	goFile  string
	members map[string]*fenceProc
}

func newShardGroup(t *testing.T, be backend, name string, n int, ttl, settle time.Duration) *shardGroup {
	return &shardGroup{t: t, env: be.env, name: name, n: n, ttl: ttl, settle: settle, obs: newObserver(t),
		goFile: filepath.Join(t.TempDir(), "go"), members: map[string]*fenceProc{}}
}

func (g *shardGroup) join(id string) *fenceProc {
	g.t.Helper()
	p := startFence(g.t, g.env, "shards", "run", g.name, "--shards", strconv.Itoa(g.n), "--member", id,
		"--ttl", g.ttl.String(), "--settle", g.settle.String(), "--",
		helperBin, "shard", "--log", g.obs.dir, "--go", g.goFile)
	g.members[id] = p
	return p
}

func (g *shardGroup) ids() []string {
	var out []string
	for id, p := range g.members {
		if !p.exited() {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// groupView is the part of `fence shards show -o json` the tests read.
type groupView struct {
	Members []struct {
		ID string `json:"id"`
	} `json:"members"`
	Shards []struct {
		Shard int    `json:"shard"`
		Owner string `json:"owner"`
		Token uint64 `json:"token"`
	} `json:"shards"`
}

func (g *shardGroup) show() (groupView, error) {
	out, code := fence(g.t, g.env, "shards", "show", g.name, "-o", "json")
	var v groupView
	if code != 0 {
		return v, fmt.Errorf("fence shards show exited %d: %s", code, out)
	}
	return v, json.Unmarshal([]byte(out), &v)
}

// settled waits until the group's map is want (by shard; nil: any map
// that is complete and within one shard of balance over the live members)
// on the coordinator and in the live commands' sets, and returns it.
func (g *shardGroup) settled(want []string) []string {
	g.t.Helper()
	deadline := time.Now().Add(hangGuard)
	var last string
	for time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
		v, err := g.show()
		if err != nil {
			last = err.Error()
			continue
		}
		ids := g.ids()
		got := make([]string, g.n)
		for _, s := range v.Shards {
			if s.Shard < g.n {
				got[s.Shard] = s.Owner
			}
		}
		count := map[string]int{}
		for _, id := range got {
			count[id]++
		}
		switch {
		case len(v.Members) != len(ids):
			last = fmt.Sprintf("%d members registered, %d live", len(v.Members), len(ids))
			continue
		case count[""] > 0:
			last = fmt.Sprintf("%d shards not held", count[""])
			continue
		case want != nil && !slices.Equal(got, want):
			last = fmt.Sprintf("map %v, want %v", got, want)
			continue
		}
		lo, hi := g.n, 0
		for _, id := range ids {
			lo, hi = min(lo, count[id]), max(hi, count[id])
		}
		if want == nil && hi-lo > 1 {
			last = fmt.Sprintf("spread %d..%d: %v", lo, hi, count)
			continue
		}
		// Every member's running command has exactly its shards.
		live := g.obs.live()
		ok := true
		for _, id := range ids {
			c := live[id]
			mine := ownedBy(got, id)
			if len(mine) == 0 {
				continue // no command runs without shards
			}
			if c == nil || len(c.Tokens) != len(mine) {
				ok = false
				last = fmt.Sprintf("%s's command does not run with its %d shards yet", id, len(mine))
				break
			}
			for _, n := range mine {
				if _, has := c.Tokens[n]; !has {
					ok = false
				}
			}
		}
		if ok {
			return got
		}
	}
	g.t.Fatalf("group %s not settled within %v: %s", g.name, hangGuard, last)
	return nil
}

// ownedBy returns the shards of member in map m, in ascending order.
func ownedBy(m []string, member string) []int {
	var out []int
	for s, id := range m {
		if id == member {
			out = append(out, s)
		}
	}
	return out
}

func moves(a, b []string) int {
	n := 0
	for s := range a {
		if a[s] != b[s] {
			n++
		}
	}
	return n
}

func shardBackends(t *testing.T) []backend {
	return []backend{localBackend(t), etcdBackend(t)}
}

// TestShardsKilled: 4 members of `fence shards run` share 64 shards, on both
// backends. Once settled the map is complete and within one shard of
// balance; one member's fence is killed with SIGKILL (its watchdog then
// stops its command at once); the other members hold its shards within its
// TTL plus the settle time (plus a second for etcd's whole-second leases
// and the acquisitions). At every sample and in the log of every command's
// life no shard is worked on by two commands, and every command's first
// write of each of its shards, with that shard's token, is accepted.
func TestShardsKilled(t *testing.T) {
	t.Parallel()
	for _, be := range shardBackends(t) {
		t.Run(be.name, func(t *testing.T) {
			const ttl, settle = 2 * time.Second, 300 * time.Millisecond
			g := newShardGroup(t, be, "killed", 64, ttl, settle)
			for _, id := range []string{"m1", "m2", "m3", "m4"} {
				g.join(id)
			}
			t0 := time.Now()
			g.settled(nil)
			t.Logf("%s: 4 members settled on 64 shards in %v", be.name, time.Since(t0).Round(time.Millisecond))

			p := g.members["m2"]
			t1 := time.Now()
			if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			<-p.done
			g.settled(nil)
			took := time.Since(t1)
			t.Logf("%s: m2 killed -9: its shards held by the others %v later (TTL %v, settle %v)", be.name, took.Round(time.Millisecond), ttl, settle)
			if limit := ttl + settle + time.Second; took > limit {
				t.Errorf("the shards moved %v after the kill; want within %v", took, limit)
			}
			samples, runs := g.obs.check()
			t.Logf("%s: invariants checked over %d samples and %d command runs", be.name, samples, runs)
		})
	}
}

// TestShardsFrozen: member A of two (8 shards) is frozen with SIGSTOP past
// its TTL. "fence": only A's fence: its watchdog stops A's command before
// A's shard leases can expire; B then takes A's shards. "tree": A's fence,
// watchdog and command group: on the local backend B's acquisition stops
// A's expired command first; on etcd nothing can stop it, so A's command is
// resumed alone after B holds and wrote A's shards, and each of its late
// writes, with its own shard's token, is refused by the guard store.
func TestShardsFrozen(t *testing.T) {
	t.Parallel()
	for _, be := range shardBackends(t) {
		for _, variant := range []string{"fence", "tree"} {
			t.Run(be.name+"/"+variant, func(t *testing.T) {
				const ttl, settle = 2 * time.Second, 200 * time.Millisecond
				g := newShardGroup(t, be, "frozen-"+variant, 8, ttl, settle)
				a := g.join("a")
				g.join("b")
				before := g.settled(nil)
				ac := g.obs.live()["a"]
				tree, err := treeOf(a.cmd.Process.Pid, ac.ID.PID)
				if err != nil {
					t.Fatal(err)
				}
				mine := ownedBy(before, "a")
				t.Logf("%s/%s: a owns %v under tokens %v", be.name, variant, mine, ac.Tokens)

				frozen := []proc.ID{tree.fence}
				if variant == "tree" {
					g.obs.mu.Lock()
					g.obs.exempt["a"] = true
					g.obs.mu.Unlock()
					if err := tree.freeze(); err != nil {
						t.Fatal(err)
					}
					frozen = append(frozen, tree.watchdog, tree.command)
				} else if err := signalID(tree.fence, syscall.SIGSTOP); err != nil {
					t.Fatal(err)
				}
				if err := waitStopped(frozen...); err != nil {
					t.Fatal(err)
				}
				stoppedAt := clock.Now()
				defer thawTree(tree)

				// B takes every shard.
				delete(g.members, "a") // a no longer counts as live
				want := make([]string, g.n)
				for i := range want {
					want[i] = "b"
				}
				g.settled(want)
				bc := g.obs.live()["b"]
				t.Logf("%s/%s: b holds all 8 shards %v after a froze", be.name, variant, clock.Now().Sub(stoppedAt).Round(time.Millisecond))
				for _, n := range mine {
					if bc.Tokens[n] <= ac.Tokens[n] {
						t.Errorf("shard %d: b's token %d is not above a's %d", n, bc.Tokens[n], ac.Tokens[n])
					}
				}
				ast := proc.Check(ac.ID)
				switch {
				case variant == "fence" || be.name == "local":
					// Dead before b's command started on a's shards.
					g.obs.mu.Lock()
					died := g.obs.cmds[ac.base].died
					g.obs.mu.Unlock()
					if ast != proc.Gone || died == 0 || died >= bc.T {
						t.Fatalf("a's command is %v (died at %v) when b's started at %v", ast, died, bc.T)
					}
					t.Logf("%s/%s: a's command died %v before b's started on its shards", be.name, variant, bc.T.Sub(died).Round(time.Millisecond))
				default:
					// etcd: a's command is frozen, not stopped. Resume it alone.
					if ast != proc.Stopped {
						t.Fatalf("a's command is %v, want stopped", ast)
					}
					if _, err := os.Stat(bc.base + ".first"); err != nil {
						waitFile(t, bc.base+".first", nil)
					}
					if _, err := signalGroup(tree.command, syscall.SIGCONT); err != nil {
						t.Fatal(err)
					}
				}
				if err := os.WriteFile(g.goFile, nil, 0o644); err != nil {
					t.Fatal(err)
				}
				if variant == "tree" && be.name == "etcd" {
					var late map[int]string
					waitFile(t, ac.base+".late", &late)
					for _, n := range mine {
						if late[n] != "stale" {
							t.Errorf("a's late write of shard %d with token %d: %q, want refused as stale", n, ac.Tokens[n], late[n])
						}
					}
					t.Logf("etcd/tree: a's late writes of its %d shards with its old tokens: %v", len(mine), late)
				}
				// b's late writes go through: it still holds every shard.
				var blate map[int]string
				waitFile(t, bc.base+".late", &blate)
				for n, r := range blate {
					if r != "ok" {
						t.Errorf("b's write of shard %d: %q", n, r)
					}
				}
				thawTree(tree)
				if code, out := a.wait(t); code != 76 {
					t.Errorf("a exited %d after the thaw, want 76:\n%s", code, out)
				}
				samples, runs := g.obs.check()
				t.Logf("%s/%s: invariants checked over %d samples and %d command runs", be.name, variant, samples, runs)
			})
		}
	}
}

// waitFile waits for a record file and decodes it into v (when not nil).
func waitFile(t *testing.T, path string, v any) {
	t.Helper()
	for end := time.Now().Add(hangGuard); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		b, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		if v != nil {
			if err := json.Unmarshal(b, v); err != nil {
				t.Fatalf("%s: %v", path, err)
			}
		}
		return
	}
	t.Fatalf("%s never written", path)
}

// TestShardsAdmin: drain, undrain, serial, parallel and a join, through the
// real binary on both backends (3 members, then 4, of 12 shards): each
// settles on the map Target gives, shards move with no overlap (samples and
// log), and a join moves exactly what the map moves, at most 1.6 times the
// least possible (what the joiner takes; TestAssignMoves measures 1.2x on
// average).
func TestShardsAdmin(t *testing.T) {
	t.Parallel()
	for _, be := range shardBackends(t) {
		t.Run(be.name, func(t *testing.T) {
			const n = 12
			g := newShardGroup(t, be, "admin", n, 3*time.Second, 200*time.Millisecond)
			for _, id := range []string{"m1", "m2", "m3"} {
				g.join(id)
			}
			ids := []string{"m1", "m2", "m3"}
			g.settled(shards.Target(n, ids, shards.Settings{}))
			admin := func(want string, args ...string) {
				t.Helper()
				out, code := fence(t, g.env, append([]string{"shards"}, args...)...)
				if code != 0 || !strings.Contains(out, want) {
					t.Fatalf("fence shards %v: exit %d, %q; want %q", args, code, out, want)
				}
			}
			admin("drained: m1", "drain", "admin", "m1")
			m := g.settled(shards.Target(n, ids, shards.Settings{Drained: []string{"m1"}}))
			if len(ownedBy(m, "m1")) != 0 {
				t.Fatalf("drained m1 owns %v", ownedBy(m, "m1"))
			}
			admin("parallel, nothing drained", "undrain", "admin", "m1")
			g.settled(shards.Target(n, ids, shards.Settings{}))
			one := "m2"
			admin("serial on m2", "serial", "admin", "--member", "m2")
			g.settled(shards.Target(n, ids, shards.Settings{Serial: &one}))
			admin("parallel, nothing drained", "parallel", "admin")
			before := g.settled(shards.Target(n, ids, shards.Settings{}))

			g.join("m4")
			ids = append(ids, "m4")
			after := g.settled(shards.Target(n, ids, shards.Settings{}))
			got, least := moves(before, after), len(ownedBy(after, "m4"))
			t.Logf("%s: m4 joined: %d shards moved, %d to m4 (the least possible)", be.name, got, least)
			if got*10 > least*16 {
				t.Errorf("the join moved %d shards, m4 took %d", got, least)
			}
			samples, runs := g.obs.check()
			t.Logf("%s: invariants checked over %d samples and %d command runs", be.name, samples, runs)
		})
	}
}

// TestShardsScale (FENCE_SHARDS_SCALE=1; slow): 1,000 shards and 10
// `fence shards run` members on etcd: the time to a settled map (every
// shard held, every member's command running with its set), the time to
// recover from one member's death (killed -9: its shards held by the
// others), and the CPU used by a member holding 100 shard leases (fence and
// its watchdog, from /proc, over a minute; the default TTL of 15s).
func TestShardsScale(t *testing.T) {
	if os.Getenv("FENCE_SHARDS_SCALE") == "" {
		t.Skip("set FENCE_SHARDS_SCALE=1 to measure (about 2 minutes)")
	}
	be := etcdBackend(t)
	const ttl, settle = 5 * time.Second, time.Second
	g := newShardGroup(t, be, "scale", 1000, ttl, settle)
	t0 := time.Now()
	for i := range 10 {
		g.join(fmt.Sprintf("m%02d", i))
	}
	g.settled(nil)
	t.Logf("1000 shards, 10 members: settled %v after the first start", time.Since(t0).Round(time.Millisecond))
	p := g.members["m03"]
	t1 := time.Now()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-p.done
	g.settled(nil)
	t.Logf("m03 killed -9: its shards held by the other 9 after %v (TTL %v, settle %v)", time.Since(t1).Round(time.Millisecond), ttl, settle)
	samples, runs := g.obs.check()
	t.Logf("invariants checked over %d samples and %d command runs", samples, runs)
	for _, p := range g.members {
		p.kill()
	}

	c := newShardGroup(t, be, "cpu", 100, 15*time.Second, settle)
	m := c.join("solo")
	c.settled(nil)
	cmd := c.obs.live()["solo"]
	tree, err := treeOf(m.cmd.Process.Pid, cmd.ID.PID)
	if err != nil {
		t.Fatal(err)
	}
	ticks := func() (f, w uint64) { return cpuTicks(t, tree.fence.PID), cpuTicks(t, tree.watchdog.PID) }
	f0, w0 := ticks()
	const span = time.Minute
	time.Sleep(span)
	f1, w1 := ticks()
	const hz = 100 // USER_HZ
	t.Logf("a member holding 100 shard leases (TTL 15s) over %v: fence %.2fs of CPU (%.2f%%), its watchdog %.2fs",
		span, float64(f1-f0)/hz, float64(f1-f0)/hz/span.Seconds()*100, float64(w1-w0)/hz)
	if out, err := os.ReadFile(cmd.base + ".first"); err != nil || strings.Count(string(out), "ok") != 100 {
		t.Errorf("the member's command did not write its 100 shards: %s %v", out, err)
	}
}

// cpuTicks is utime + stime of pid, in clock ticks (/proc/PID/stat fields
// 14 and 15).
func cpuTicks(t *testing.T, pid int) uint64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	u, _ := strconv.ParseUint(f[11], 10, 64)
	k, _ := strconv.ParseUint(f[12], 10, 64)
	return u + k
}
