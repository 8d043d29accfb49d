package coordtest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fence-dev/fence/pkg/clock"
	"github.com/fence-dev/fence/pkg/coord"
)

// defaultTTL and maxHolderLen are coord's: the TTL of the zero
// AcquireOptions and the longest holder.
const (
	defaultTTL   = 15 * time.Second
	maxHolderLen = 1024
)

// tokens checks that every token it sees is larger than the last.
type tokens struct {
	t    testing.TB
	last uint64
	what string
}

func (k *tokens) next(l *coord.Lease, how string) {
	k.t.Helper()
	if l.Token <= k.last {
		k.t.Errorf("token %d %s is not greater than the previous %d (%s)", l.Token, how, k.last, k.what)
	}
	k.last, k.what = l.Token, how
}

// restart restarts the coordinator (all clients are closed by then).
func (s *suite) restart(t testing.TB) {
	t.Helper()
	if s.h.Restart != nil {
		s.h.Restart(t)
	}
}

// tokensAcrossRestart: tokens go up across holders, releases, revocation,
// expiry and restarts; a lease held across a restart is still held.
func (s *suite) tokensAcrossRestart(t *testing.T) {
	name := s.name(t, "lock")
	c1, c2 := s.client(t), s.client(t)
	k := &tokens{t: t}

	l := acquire(t, c1, name, coord.AcquireOptions{Holder: "first"})
	k.next(l, "first grant")
	release(t, c1, l)
	l = acquire(t, c2, name, coord.AcquireOptions{Holder: "second"})
	k.next(l, "for another holder after a release")
	release(t, c2, l)
	l = acquire(t, c2, name, coord.AcquireOptions{Holder: "second"})
	k.next(l, "for the same holder again")
	if _, err := c1.Revoke(ctx(t), name); err != nil {
		t.Fatalf("Revoke: %v", err)
	}
	l = acquire(t, c1, name, coord.AcquireOptions{Holder: "after-revoke"})
	k.next(l, "after a revocation")
	release(t, c1, l)

	short := acquire(t, c1, name, coord.AcquireOptions{Holder: "expires", TTL: s.h.ShortTTL})
	k.next(short, "with a short TTL")
	l = acquire(t, c2, name, coord.AcquireOptions{Holder: "after-expiry", Wait: coord.WaitForever})
	if d := time.Since(short.Sent); d < short.TTL {
		t.Errorf("lease with TTL %v taken over %v after it was requested", short.TTL, d)
	}
	k.next(l, "after an expiry")
	release(t, c2, l)

	held := acquire(t, c1, name, coord.AcquireOptions{Holder: "across-restart", TTL: 2 * guard})
	k.next(held, "before the restart")
	for _, c := range []coord.Coordinator{c1, c2} {
		if err := c.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	}
	s.restart(t)
	c3 := s.client(t)
	wantHeldBy(t, c3, held)
	if _, err := tryAcquire(t, c3, name, coord.AcquireOptions{Wait: 0}); !errors.Is(err, coord.ErrBusy) {
		t.Fatalf("after a restart, the lock held across it: Acquire(no wait) = %v, want ErrBusy", err)
	}
	release(t, c3, held) // by lease id, from a client opened after the restart
	l = acquire(t, c3, name, coord.AcquireOptions{Holder: "after-restart", Wait: 0})
	k.next(l, "after a restart (lock held across it)")
	release(t, c3, l)

	if err := c3.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	s.restart(t)
	c4 := s.client(t)
	l = acquire(t, c4, name, coord.AcquireOptions{Holder: "after-second-restart", Wait: 0})
	k.next(l, "after a restart (lock free across it)")
	release(t, c4, l)
}

// mutualExclusion: 20+ contenders with their own clients (and, with Spawn,
// processes) never overlap, and tokens increase in the order they held.
func (s *suite) mutualExclusion(t *testing.T) {
	const goroutines, rounds = 20, 2
	procs := 0
	if s.h.Spawn != nil {
		procs = 4
	}
	name := s.name(t, "mutex")
	sec := &section{dir: t.TempDir()}
	cx := ctx(t)

	var ps []*proc
	for i := 0; i < procs; i++ {
		ps = append(ps, s.spawn(t, nil, "contend", name, fmt.Sprint(rounds), sec.dir))
	}
	clients := make([]coord.Coordinator, goroutines)
	for i := range clients {
		clients[i] = s.client(t)
	}
	for _, p := range ps {
		p.next(t, "ready")
	}
	t0 := time.Now()
	// Every contender starts at once, processes and goroutines alike.
	errs := make(chan error, goroutines)
	gate := make(chan struct{})
	for i, c := range clients {
		go func() {
			<-gate
			errs <- contend(cx, c, name, rounds, sec, fmt.Sprintf("goroutine-%d", i))
		}()
	}
	for _, p := range ps {
		p.start(t)
	}
	close(gate)
	for range clients {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	for _, p := range ps {
		p.finish(t)
	}
	elapsed := time.Since(t0)
	problems, ivs := sec.check((goroutines + procs) * rounds)
	for _, p := range problems {
		t.Error(p)
	}
	crossings := 0 // hand-overs between processes
	for i := 1; i < len(ivs); i++ {
		if strings.HasPrefix(ivs[i].Who, "helper-") || strings.HasPrefix(ivs[i-1].Who, "helper-") {
			crossings++
		}
	}
	t.Logf("%d contenders (%d processes), %d acquisitions in %v, %d hand-overs to or from another process",
		goroutines+procs, procs, len(ivs), elapsed, crossings)
	if info := inspect(t, clients[0], name); info.Held {
		t.Errorf("lock still held by %q (token %d) after every contender released it", info.Holder, info.Token)
	}
}

// fifo: waiters are served in the order they queued.
func (s *suite) fifo(t *testing.T) {
	const waiters = 6
	name := s.name(t, "fifo")
	cx := ctx(t)
	holder := acquire(t, s.client(t), name, coord.AcquireOptions{Holder: "fifo-holder"})
	var (
		mu     sync.Mutex
		order  []int
		tokens []uint64
	)
	done := make(chan error, waiters)
	for i := 0; i < waiters; i++ {
		c := s.client(t)
		queued := make(chan struct{})
		calls := 0
		opts := coord.AcquireOptions{
			TTL: guard, Holder: fmt.Sprintf("fifo-waiter-%d", i), Wait: coord.WaitForever,
			OnWait: func(cur coord.LockInfo) {
				calls++
				if calls == 1 {
					close(queued)
				} else {
					t.Errorf("waiter %d: OnWait called %d times", i, calls)
				}
				if !cur.Held || cur.Token != holder.Token {
					t.Errorf("waiter %d: OnWait saw held %v token %d, want the holder's token %d", i, cur.Held, cur.Token, holder.Token)
				}
			},
		}
		go func() {
			l, err := c.Acquire(cx, name, opts)
			if err == nil {
				mu.Lock()
				order = append(order, i)
				tokens = append(tokens, l.Token)
				mu.Unlock()
				err = c.Release(cx, name, l.ID)
			}
			done <- err
		}()
		// The next waiter starts only once this one has its place.
		signalled(t, queued, fmt.Sprintf("waiter %d queued (OnWait)", i))
	}
	if info := inspect(t, s.client(t), name); info.Waiters != waiters {
		t.Errorf("Inspect with %d waiters queued: Waiters = %d", waiters, info.Waiters)
	}
	release(t, s.client(t), holder)
	for i := 0; i < waiters; i++ {
		select {
		case err := <-done:
			if err != nil {
				t.Error(err)
			}
		case <-time.After(guard):
			t.Fatalf("waiters still waiting after %v; served so far: %v", guard, order)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for i, w := range order {
		if w != i {
			t.Fatalf("waiters served in order %v, want 0..%d (the order they queued)", order, waiters-1)
		}
	}
	for i, tok := range tokens {
		if (i == 0 && tok <= holder.Token) || (i > 0 && tok <= tokens[i-1]) {
			t.Errorf("tokens in service order: holder %d then %v, not increasing", holder.Token, tokens)
		}
	}
}

// noWait: Wait 0 fails at once with ErrBusy, also for the holder's own
// client (leases are not reentrant), and leaves nothing behind.
func (s *suite) noWait(t *testing.T) {
	name := s.name(t, "nowait")
	c1, c2 := s.client(t), s.client(t)
	l := acquire(t, c1, name, coord.AcquireOptions{Holder: "holder", OnWait: func(cur coord.LockInfo) {
		t.Errorf("OnWait called (holder %q) by an Acquire of a free lock", cur.Holder)
	}})
	for i, c := range []coord.Coordinator{c2, c1} {
		if got, err := tryAcquire(t, c, name, coord.AcquireOptions{Holder: "busy", Wait: 0}); !errors.Is(err, coord.ErrBusy) {
			t.Fatalf("Acquire(no wait) of a held lock from client %d = %v, %v; want ErrBusy", i+1, got, err)
		}
	}
	wantHeldBy(t, c2, l)
	release(t, c1, l)
	// The failed attempts left no place in the queue behind them.
	l2 := acquire(t, c2, name, coord.AcquireOptions{Holder: "next", Wait: 0})
	if l2.Token <= l.Token {
		t.Errorf("token %d after %d", l2.Token, l.Token)
	}
	release(t, c2, l2)
}

// timeout: a bounded wait gives up with ErrBusy no earlier than Wait, and
// succeeds when the lock is released within it.
func (s *suite) timeout(t *testing.T) {
	name := s.name(t, "timeout")
	c1, c2 := s.client(t), s.client(t)
	l := acquire(t, c1, name, coord.AcquireOptions{Holder: "holder"})
	const wait = 300 * time.Millisecond
	start := time.Now()
	_, err := tryAcquire(t, c2, name, coord.AcquireOptions{Holder: "gives-up", Wait: wait})
	elapsed := time.Since(start)
	if !errors.Is(err, coord.ErrBusy) {
		t.Fatalf("Acquire(wait %v) of a held lock = %v, want ErrBusy", wait, err)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Acquire(wait %v) timed out with %v: it must be ErrBusy, not a context error", wait, err)
	}
	if elapsed < wait {
		t.Errorf("Acquire(wait %v) gave up after %v, before its wait ran out", wait, elapsed)
	}

	queued := make(chan struct{})
	ch := goAcquire(ctx(t), c2, name, coord.AcquireOptions{Holder: "in-time", Wait: guard, OnWait: notify(queued)})
	signalled(t, queued, "bounded waiter queued")
	release(t, c1, l)
	r := await(t, ch, "bounded waiter")
	if r.err != nil {
		t.Fatalf("Acquire(wait %v) released in time: %v", guard, r.err)
	}
	if r.l.Token <= l.Token {
		t.Errorf("token %d after %d", r.l.Token, l.Token)
	}
	release(t, c2, r.l)
}

// expiryTakeover: a lease not renewed expires after its TTL, not before, and
// a waiter takes the lock over with a larger token; the old lease is gone.
func (s *suite) expiryTakeover(t *testing.T) {
	name := s.name(t, "expiry")
	c1, c2 := s.client(t), s.client(t)
	// Not a whole number of seconds: a backend that rounds the TTL up must
	// report, and honour, what it granted.
	l1 := acquire(t, c1, name, coord.AcquireOptions{Holder: "expires", TTL: s.h.ShortTTL * 3 / 2})
	r := await(t, goAcquire(ctx(t), c2, name, coord.AcquireOptions{Holder: "taker", Wait: coord.WaitForever}), "taker")
	if r.err != nil {
		t.Fatalf("taker: %v", r.err)
	}
	if d := r.at.Sub(l1.Sent); d < l1.TTL {
		t.Errorf("lease with granted TTL %v taken over %v after it was requested: before it could expire", l1.TTL, d)
	}
	if r.l.Token <= l1.Token {
		t.Errorf("taker's token %d is not greater than the expired holder's %d", r.l.Token, l1.Token)
	}
	if _, err := c1.Renew(ctx(t), name, l1.ID); !errors.Is(err, coord.ErrLeaseLost) {
		t.Errorf("Renew of an expired lease = %v, want ErrLeaseLost", err)
	}
	if err := c1.Release(ctx(t), name, l1.ID); err != nil {
		t.Errorf("Release of an expired lease = %v, want nil", err)
	}
	wantHeldBy(t, c1, r.l) // neither call touched the taker's lease
	release(t, c2, r.l)
}

// expiryFree: with nobody waiting, an expired lock reads as free, never
// before its TTL; Renew then reports the lease lost.
func (s *suite) expiryFree(t *testing.T) {
	name := s.name(t, "expiry-free")
	c1, c2 := s.client(t), s.client(t)
	l := acquire(t, c1, name, coord.AcquireOptions{Holder: "expires", TTL: s.h.ShortTTL})
	for {
		info := inspect(t, c2, name)
		now := time.Now()
		if !info.Held {
			if d := now.Sub(l.Sent); d < l.TTL {
				t.Fatalf("lock read as free %v after the grant was requested, before its TTL %v", d, l.TTL)
			}
			break
		}
		if info.Token != l.Token {
			t.Fatalf("held by token %d, want %d", info.Token, l.Token)
		}
		if now.Sub(l.Sent) > l.TTL+guard {
			t.Fatalf("lease with TTL %v still held %v after its grant", l.TTL, now.Sub(l.Sent))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := c1.Renew(ctx(t), name, l.ID); !errors.Is(err, coord.ErrLeaseLost) {
		t.Errorf("Renew after expiry = %v, want ErrLeaseLost", err)
	}
	l2 := acquire(t, c2, name, coord.AcquireOptions{Holder: "next", Wait: 0})
	if l2.Token <= l.Token {
		t.Errorf("token %d after the expired %d", l2.Token, l.Token)
	}
	release(t, c2, l2)
}

// renewKeepsLease: renewing keeps the lease for several TTLs while another
// client waits; each renewal reports its send time and granted TTL.
func (s *suite) renewKeepsLease(t *testing.T) {
	name := s.name(t, "renew")
	c1, c2 := s.client(t), s.client(t)
	ttl := max(2*s.h.ShortTTL, 2*time.Second)
	l := acquire(t, c1, name, coord.AcquireOptions{Holder: "renewer", TTL: ttl})
	queued := make(chan struct{})
	waiter := goAcquire(ctx(t), c2, name, coord.AcquireOptions{Holder: "waiter", Wait: coord.WaitForever, OnWait: notify(queued)})
	signalled(t, queued, "waiter queued")
	lastSent, lastTTL := l.Sent, l.TTL
	end := time.Now().Add(3 * l.TTL)
	renewals := 0
	for time.Now().Before(end) {
		time.Sleep(l.TTL / 4)
		before := time.Now()
		r, err := c1.Renew(ctx(t), name, l.ID)
		after := time.Now()
		if err != nil {
			t.Fatalf("Renew %v after the last acknowledged send (TTL %v): %v", before.Sub(lastSent), lastTTL, err)
		}
		renewals++
		if r.Sent.Before(before) || r.Sent.After(after) {
			t.Errorf("Renewal.Sent %v is outside the Renew call [%v, %v]", r.Sent, before, after)
		}
		if r.TTL < ttl {
			t.Errorf("Renewal.TTL %v is less than the requested %v", r.TTL, ttl)
		}
		lastSent, lastTTL = r.Sent, r.TTL
		select {
		case res := <-waiter:
			t.Fatalf("waiter got the lock (%v, %v) while its lease was being renewed", res.l, res.err)
		default:
		}
	}
	wantHeldBy(t, c2, l)
	release(t, c1, l)
	r := await(t, waiter, "waiter")
	if r.err != nil {
		t.Fatalf("waiter: %v", r.err)
	}
	if r.l.Token <= l.Token {
		t.Errorf("token %d after %d", r.l.Token, l.Token)
	}
	release(t, c2, r.l)
	t.Logf("held for %v with TTL %v through %d renewals", 3*l.TTL, l.TTL, renewals)
}

// releaseIdempotent: Release twice is fine; releasing or renewing an old
// lease never touches the current holder. Naming the holder's lease under
// another lock touches nothing either and is bad input (ErrInvalid: the
// lease exists, on another lock), from any client, its owner's too.
func (s *suite) releaseIdempotent(t *testing.T) {
	name := s.name(t, "release")
	other := s.name(t, "release-other")
	c1, c2 := s.client(t), s.client(t)
	l1 := acquire(t, c1, name, coord.AcquireOptions{Holder: "first"})
	release(t, c1, l1)
	release(t, c1, l1)
	l2 := acquire(t, c2, name, coord.AcquireOptions{Holder: "second", Wait: 0})
	if l2.Token <= l1.Token {
		t.Errorf("token %d after %d", l2.Token, l1.Token)
	}
	if err := c1.Release(ctx(t), name, l1.ID); err != nil {
		t.Errorf("Release of an old lease while another holds the lock = %v, want nil", err)
	}
	wantHeldBy(t, c2, l2)
	if _, err := c1.Renew(ctx(t), name, l1.ID); !errors.Is(err, coord.ErrLeaseLost) {
		t.Errorf("Renew of a released lease = %v, want ErrLeaseLost", err)
	}
	wantHeldBy(t, c2, l2)
	for _, c := range []coord.Coordinator{c1, c2} {
		err := c.Release(ctx(t), other, l2.ID)
		if !errors.Is(err, coord.ErrInvalid) || errors.Is(err, coord.ErrLeaseLost) || strings.Contains(err.Error(), "\n") {
			t.Errorf("Release(%q, id of the lease on %q) = %v, want ErrInvalid (another lock's lease)", other, name, err)
		}
		_, err = c.Renew(ctx(t), other, l2.ID)
		if !errors.Is(err, coord.ErrInvalid) || errors.Is(err, coord.ErrLeaseLost) || strings.Contains(err.Error(), "\n") {
			t.Errorf("Renew(%q, id of the lease on %q) = %v, want ErrInvalid (another lock's lease)", other, name, err)
		}
		wantHeldBy(t, c2, l2)
		if info := inspect(t, c, other); info.Held {
			t.Errorf("%q held by %q after a Renew or Release of another lock's lease", other, info.Holder)
		}
	}
	if _, err := c2.Renew(ctx(t), name, l2.ID); err != nil {
		t.Errorf("Renew of the holder's lease after the refusals: %v", err)
	}
	release(t, c2, l2)
	release(t, c1, l2)
	if info := inspect(t, c1, name); info.Held {
		t.Errorf("lock held by %q after every lease was released", info.Holder)
	}
}

// badLeaseID: a lease id that no backend can have issued is bad input for
// Renew and Release (ErrInvalid, one line, not ErrLeaseLost), on a held lock
// or a free one, and touches nothing.
func (s *suite) badLeaseID(t *testing.T) {
	name := s.name(t, "held")
	free := s.name(t, "free")
	c1, c2 := s.client(t), s.client(t)
	l := acquire(t, c1, name, coord.AcquireOptions{Holder: "holder"})
	for _, id := range []string{"zz!", "", "0", "-1", "not a lease", "ab\x00cd", "\n", strings.Repeat("f", 300)} {
		for _, n := range []string{name, free} {
			for _, c := range []coord.Coordinator{c1, c2} {
				_, err := c.Renew(ctx(t), n, id)
				if !errors.Is(err, coord.ErrInvalid) || errors.Is(err, coord.ErrLeaseLost) || strings.Contains(err.Error(), "\n") {
					t.Errorf("Renew(%q, %q) = %v, want a one-line ErrInvalid", n, id, err)
				}
				err = c.Release(ctx(t), n, id)
				if !errors.Is(err, coord.ErrInvalid) || strings.Contains(err.Error(), "\n") {
					t.Errorf("Release(%q, %q) = %v, want a one-line ErrInvalid", n, id, err)
				}
			}
		}
	}
	wantHeldBy(t, c2, l)
	if info := inspect(t, c2, free); info.Held {
		t.Errorf("%q held by %q", free, info.Holder)
	}
	if _, err := c1.Renew(ctx(t), name, l.ID); err != nil {
		t.Errorf("Renew of the holder's lease after the refusals: %v", err)
	}
	release(t, c1, l)
}

// revoke: an operator ends the holder's lease; the holder's Renew then fails,
// a waiter gets the lock, and revoking a free lock is ErrNotHeld.
func (s *suite) revoke(t *testing.T) {
	name := s.name(t, "revoke")
	c1, op, c3 := s.client(t), s.client(t), s.client(t)
	if _, err := op.Revoke(ctx(t), name); !errors.Is(err, coord.ErrNotHeld) {
		t.Errorf("Revoke of a never-used lock = %v, want ErrNotHeld", err)
	}
	l := acquire(t, c1, name, coord.AcquireOptions{Holder: "victim"})
	queued := make(chan struct{})
	waiter := goAcquire(ctx(t), c3, name, coord.AcquireOptions{Holder: "waiter", Wait: coord.WaitForever, OnWait: notify(queued)})
	signalled(t, queued, "waiter queued")
	info, err := op.Revoke(ctx(t), name)
	if err != nil {
		t.Fatalf("Revoke of a held lock: %v", err)
	}
	if !info.Held || info.Token != l.Token || info.LeaseID != l.ID || info.Holder != "victim" {
		t.Errorf("Revoke returned held %v holder %q token %d lease %q; want the victim's token %d lease %q",
			info.Held, info.Holder, info.Token, info.LeaseID, l.Token, l.ID)
	}
	if _, err := c1.Renew(ctx(t), name, l.ID); !errors.Is(err, coord.ErrLeaseLost) {
		t.Errorf("Renew of a revoked lease = %v, want ErrLeaseLost", err)
	}
	r := await(t, waiter, "waiter after the revocation")
	if r.err != nil {
		t.Fatalf("waiter: %v", r.err)
	}
	if r.l.Token <= l.Token {
		t.Errorf("token %d after the revoked %d", r.l.Token, l.Token)
	}
	if err := c1.Release(ctx(t), name, l.ID); err != nil {
		t.Errorf("Release of a revoked lease = %v, want nil", err)
	}
	wantHeldBy(t, op, r.l)
	if info, err := op.Revoke(ctx(t), name); err != nil || info.Token != r.l.Token {
		t.Fatalf("second Revoke = token %d, %v; want the waiter's token %d", info.Token, err, r.l.Token)
	}
	if _, err := op.Revoke(ctx(t), name); !errors.Is(err, coord.ErrNotHeld) {
		t.Errorf("Revoke of a free lock = %v, want ErrNotHeld", err)
	}
	if err := c3.Release(ctx(t), name, r.l.ID); err != nil {
		t.Errorf("Release of a revoked lease = %v, want nil", err)
	}
}

// inspect: a free lock, then a held one with every field.
func (s *suite) inspect(t *testing.T) {
	name := s.name(t, "inspect")
	c1, c2 := s.client(t), s.client(t)
	if c1.Describe() == "" {
		t.Errorf("Describe() is empty")
	}
	if info := inspect(t, c2, name); info.Held || info.Holder != "" || info.Token != 0 || info.LeaseID != "" {
		t.Errorf("never-used lock reads as held %v holder %q token %d lease %q", info.Held, info.Holder, info.Token, info.LeaseID)
	}
	l := acquire(t, c1, name, coord.AcquireOptions{Holder: "inspected", TTL: guard})
	info := inspect(t, c2, name)
	if !info.Held || info.Holder != "inspected" || info.Token != l.Token || info.LeaseID != l.ID {
		t.Errorf("Inspect = held %v holder %q token %d lease %q; want holder %q token %d lease %q",
			info.Held, info.Holder, info.Token, info.LeaseID, "inspected", l.Token, l.ID)
	}
	if info.TTL != l.TTL {
		t.Errorf("Inspect TTL %v, lease granted %v", info.TTL, l.TTL)
	}
	if info.TTLLeft <= 0 || info.TTLLeft > info.TTL {
		t.Errorf("Inspect TTLLeft %v, want in (0, %v]", info.TTLLeft, info.TTL)
	}
	if d := info.AcquiredAt.Sub(l.AcquiredAt); d < -time.Second || d > time.Second {
		t.Errorf("Inspect AcquiredAt %v, lease says %v", info.AcquiredAt, l.AcquiredAt)
	}
	if held := info.HeldFor(time.Now()); held < 0 || held > guard {
		t.Errorf("HeldFor = %v just after the grant", held)
	}
	if info.LastToken < info.Token {
		t.Errorf("Inspect LastToken %d is less than the live holder's token %d", info.LastToken, info.Token)
	}
	release(t, c1, l)
	if info := inspect(t, c2, name); info.Held || info.Holder != "" || info.LeaseID != "" {
		t.Errorf("released lock reads as held %v holder %q lease %q", info.Held, info.Holder, info.LeaseID)
	}
	// Without a holder name, the holder is HOSTNAME:PID.
	l = acquire(t, c1, name, coord.AcquireOptions{})
	if want := coord.DefaultHolder(); l.Holder != want || inspect(t, c2, name).Holder != want {
		t.Errorf("default holder %q, want %q", l.Holder, want)
	}
	release(t, c1, l)
}

// list: prefix filtering by plain string prefix, sorted by name, holders and
// tokens right.
func (s *suite) list(t *testing.T) {
	p := s.name(t, "")
	c1, c2 := s.client(t), s.client(t)
	held := map[string]*coord.Lease{}
	for _, n := range []string{"a", "a/b", "ab", "b"} {
		held[p+n] = acquire(t, c1, p+n, coord.AcquireOptions{Holder: "holder-" + n})
	}
	outside := strings.TrimSuffix(p, "/") // a prefix of p, not under it
	acquire(t, c1, outside, coord.AcquireOptions{Holder: "outside"})

	check := func(prefix string, want ...string) []coord.LockInfo {
		t.Helper()
		got, err := c2.List(ctx(t), prefix)
		if err != nil {
			t.Fatalf("List(%q): %v", prefix, err)
		}
		var heldNames []string
		for i, info := range got {
			if !strings.HasPrefix(info.Name, prefix) {
				t.Errorf("List(%q) returned %q", prefix, info.Name)
			}
			if i > 0 && got[i-1].Name >= info.Name {
				t.Errorf("List(%q) not sorted by name or has duplicates: %q then %q", prefix, got[i-1].Name, info.Name)
			}
			if !info.Held {
				continue
			}
			heldNames = append(heldNames, info.Name)
			l := held[info.Name]
			if l == nil {
				if strings.HasPrefix(info.Name, p) {
					t.Errorf("List(%q) shows %q held by %q; it is free", prefix, info.Name, info.Holder)
				}
				continue
			}
			if info.Token != l.Token || info.Holder != l.Holder || info.LeaseID != l.ID {
				t.Errorf("List(%q) shows %q held by %q token %d lease %q; want %q token %d lease %q",
					prefix, info.Name, info.Holder, info.Token, info.LeaseID, l.Holder, l.Token, l.ID)
			}
			if info.TTLLeft <= 0 || info.TTLLeft > info.TTL {
				t.Errorf("List(%q): %q TTLLeft %v of TTL %v", prefix, info.Name, info.TTLLeft, info.TTL)
			}
		}
		var mine []string
		for _, n := range heldNames {
			if strings.HasPrefix(n, p) {
				mine = append(mine, n)
			}
		}
		for i := range want {
			want[i] = p + want[i]
		}
		if fmt.Sprint(mine) != fmt.Sprint(want) {
			t.Errorf("List(%q) held locks of this case: %q, want %q", prefix, mine, want)
		}
		return got
	}
	check(p, "a", "a/b", "ab", "b")
	check(p+"a", "a", "a/b", "ab")
	check(p+"a/", "a/b")
	check(p + "c")
	all := check("", "a", "a/b", "ab", "b")
	found := false
	for _, info := range all {
		found = found || (info.Name == outside && info.Held)
	}
	if !found {
		t.Errorf("List(\"\") does not show %q, which is held", outside)
	}
	release(t, c1, held[p+"b"])
	delete(held, p+"b")
	check(p, "a", "a/b", "ab")
}

// namesIndependent: no lock waits behind another whose name it extends or
// that extends it, nor behind names that an escaping scheme might confuse.
func (s *suite) namesIndependent(t *testing.T) {
	p := s.name(t, "")
	c1, c2 := s.client(t), s.client(t)
	groups := [][]string{
		{"n", "n/", "n/b", "n/b/c", "nb", "n ", "n%2F", "n%2Fb", "n%", "N", "n.", "n\\", "né"},
		{"q/b", "q", "q/", "q/b/c", "q%2Fb"}, // the longer name first
	}
	var all []*coord.Lease
	for _, g := range groups {
		for i, n := range g {
			c := c1
			if i%2 == 1 {
				c = c2
			}
			l, err := tryAcquire(t, c, p+n, coord.AcquireOptions{Holder: "h-" + n, Wait: 0})
			if err != nil {
				t.Errorf("Acquire(%q, no wait) while %q are held: %v", p+n, g[:i], err)
				continue
			}
			all = append(all, l)
		}
	}
	for _, l := range all {
		wantHeldBy(t, c1, l)
	}
}

// nameBoundaries: the longest names, multi-byte names and odd characters
// round-trip; names differing only in their last byte are distinct.
func (s *suite) nameBoundaries(t *testing.T) {
	p := s.name(t, "")
	c := s.client(t)
	pad := func(fill string) string {
		n := p
		for len(n)+len(fill) <= coord.MaxNameLen {
			n += fill
		}
		for len(n) < coord.MaxNameLen {
			n += "x"
		}
		return n
	}
	long := pad("x")
	names := []string{
		long, long[:len(long)-1] + "y", pad("é"), pad("/"), pad("%"),
		p + "ünïcode ✓", p + "with space", p + ".", p + "..", p + "a/../b", p + "/lead", p + "trail/", p + "a//b",
		p + "%", p + "%25", p + "~!@#$^&*()[]{}'\"`|;:,<>?=+",
	}
	var ls []*coord.Lease
	for _, n := range names {
		if len(n) > coord.MaxNameLen {
			t.Fatalf("test bug: %d-byte name", len(n))
		}
		l, err := tryAcquire(t, c, n, coord.AcquireOptions{Holder: "boundary", Wait: 0})
		if err != nil {
			t.Errorf("Acquire(%q) (%d bytes): %v", n, len(n), err)
			continue
		}
		ls = append(ls, l)
	}
	for _, l := range ls {
		wantHeldBy(t, c, l)
		got, err := c.List(ctx(t), l.Name)
		if err != nil {
			t.Fatalf("List(%q): %v", l.Name, err)
		}
		if len(got) == 0 || got[0].Name != l.Name || !got[0].Held {
			t.Errorf("List(%q) = %v, want the lock first and held", l.Name, got)
		}
	}
	for _, l := range ls {
		release(t, c, l)
	}
}

// watch: acquisitions and releases under the prefix are sent, nothing from
// outside it, and the channel closes when the context ends.
func (s *suite) watch(t *testing.T) {
	p := s.name(t, "")
	c1, c2 := s.client(t), s.client(t)
	wctx, cancel := context.WithCancel(ctx(t))
	defer cancel()
	ch, err := c1.Watch(wctx, p)
	if err != nil {
		t.Fatalf("Watch(%q): %v", p, err)
	}
	outside := strings.TrimSuffix(p, "/") + "x"
	lo := acquire(t, c2, outside, coord.AcquireOptions{Holder: "outside"})
	release(t, c2, lo)

	expect := func(typ coord.EventType, name string, match func(coord.LockInfo) bool) {
		t.Helper()
		timer := time.NewTimer(guard)
		defer timer.Stop()
		for {
			select {
			case ev, ok := <-ch:
				if !ok {
					t.Fatalf("watch channel closed while waiting for %s of %q", typ, name)
				}
				if ev.Type == coord.EventReset {
					t.Fatalf("unexpected reset event while waiting for %s of %q", typ, name)
				}
				if !strings.HasPrefix(ev.Info.Name, p) {
					t.Errorf("Watch(%q) sent %s of %q", p, ev.Type, ev.Info.Name)
					continue
				}
				if ev.Type == typ && ev.Info.Name == name {
					if !match(ev.Info) {
						t.Errorf("%s event of %q: %+v", typ, name, ev.Info)
					}
					return
				}
			case <-timer.C:
				t.Fatalf("no %s event of %q within %v", typ, name, guard)
			}
		}
	}
	name := p + "w"
	l := acquire(t, c2, name, coord.AcquireOptions{Holder: "watched"})
	expect(coord.EventAcquired, name, func(i coord.LockInfo) bool {
		return i.Held && i.Token == l.Token && i.Holder == "watched" && i.LeaseID == l.ID
	})
	release(t, c2, l)
	expect(coord.EventReleased, name, func(i coord.LockInfo) bool { return !i.Held })
	l2 := acquire(t, c2, name, coord.AcquireOptions{Holder: "again"})
	expect(coord.EventAcquired, name, func(i coord.LockInfo) bool { return i.Held && i.Token == l2.Token })
	if _, err := c2.Revoke(ctx(t), name); err != nil {
		t.Fatal(err)
	}
	expect(coord.EventReleased, name, func(i coord.LockInfo) bool { return !i.Held })

	cancel()
	timer := time.NewTimer(guard)
	defer timer.Stop()
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				return
			}
		case <-timer.C:
			t.Fatalf("watch channel still open %v after its context ended", guard)
		}
	}
}

// badInput: invalid names and TTLs are ErrInvalid from every call, at once,
// and leave nothing behind.
func (s *suite) badInput(t *testing.T) {
	c := s.client(t)
	bad := []string{"", "a\x00b", "tab\there", "nl\n", "\x1b[31mred", "del\x7f", "c1\u0085", "\xff\xfe",
		strings.Repeat("x", coord.MaxNameLen+1), strings.Repeat("é", coord.MaxNameLen/2) + "x",
		// Invisible: a right-to-left override, a zero-width space, a
		// byte order mark, a Hangul filler; private use, unassigned.
		"evil\u202etxt.sh", "a\u200bb", "\ufeffa", "a\u3164", "a\ue000", "a\u0378"}
	for _, n := range bad {
		cx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := c.Acquire(cx, n, coord.AcquireOptions{TTL: time.Minute, Wait: coord.WaitForever})
		wantErr(t, fmt.Sprintf("Acquire(%q)", n), err, coord.ErrInvalid)
		if err != nil && strings.Contains(err.Error(), "\n") {
			t.Errorf("Acquire(%q) error spans lines: %q", n, err)
		}
		_, err = c.Inspect(cx, n)
		wantErr(t, fmt.Sprintf("Inspect(%q)", n), err, coord.ErrInvalid)
		_, err = c.Renew(cx, n, "1")
		wantErr(t, fmt.Sprintf("Renew(%q)", n), err, coord.ErrInvalid)
		wantErr(t, fmt.Sprintf("Release(%q)", n), c.Release(cx, n, "1"), coord.ErrInvalid)
		_, err = c.Revoke(cx, n)
		wantErr(t, fmt.Sprintf("Revoke(%q)", n), err, coord.ErrInvalid)
		cancel()
	}
	name := s.name(t, "ttl")
	for _, ttl := range []time.Duration{-time.Second, -time.Nanosecond, 7*24*time.Hour + time.Second} {
		_, err := c.Acquire(ctx(t), name, coord.AcquireOptions{TTL: ttl, Wait: 0})
		wantErr(t, fmt.Sprintf("Acquire with TTL %v", ttl), err, coord.ErrInvalid)
	}
	// The other options are checked alike by every backend
	// (coordkit.CheckAcquire), also those a backend does not use, and on a
	// free lock as on a held one.
	other := s.client(t)
	held := s.name(t, "held")
	hl := acquire(t, other, held, coord.AcquireOptions{})
	for _, tc := range []struct {
		what string
		o    coord.AcquireOptions
	}{
		{"negative wait", coord.AcquireOptions{Wait: -2 * time.Second}},
		{"wait of -1ms", coord.AcquireOptions{Wait: -time.Millisecond}},
		{"holder with a newline", coord.AcquireOptions{Holder: "a\nb"}},
		{"holder with a right-to-left override", coord.AcquireOptions{Holder: "root\u202e"}},
		{"holder with a zero-width space", coord.AcquireOptions{Holder: "ops\u200b"}},
		{"holder too long", coord.AcquireOptions{Holder: strings.Repeat("h", maxHolderLen+1)}},
		{"holder not UTF-8", coord.AcquireOptions{Holder: "\xff"}},
		{"process id 0", coord.AcquireOptions{Process: &coord.ProcessInfo{PIDs: []int{0}}}},
		{"negative process id", coord.AcquireOptions{Process: &coord.ProcessInfo{PIDs: []int{-5}}}},
		{"negative process group", coord.AcquireOptions{Process: &coord.ProcessInfo{PGID: -1}}},
		{"init's process group", coord.AcquireOptions{Process: &coord.ProcessInfo{PGID: 1}}},
	} {
		for _, n := range []string{name, held} {
			cx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			o := tc.o
			o.TTL = time.Minute
			l, err := c.Acquire(cx, n, o)
			cancel()
			wantErr(t, fmt.Sprintf("Acquire(%q) with %s", n, tc.what), err, coord.ErrInvalid)
			if err == nil {
				release(t, c, l)
			}
		}
	}
	release(t, other, hl)
	l := acquire(t, c, name, coord.AcquireOptions{Wait: 0})
	release(t, c, l)
}

// zeroOptions: the zero AcquireOptions takes a lease of defaultTTL
// (at least: a backend may grant more) for coord.DefaultHolder(), and does
// not wait for a held lock (a try-lock).
func (s *suite) zeroOptions(t *testing.T) {
	name := s.name(t, "")
	c1, c2 := s.client(t), s.client(t)
	l, err := c1.Acquire(ctx(t), name, coord.AcquireOptions{})
	if err != nil {
		t.Fatalf("Acquire with zero options: %v", err)
	}
	if l.TTL < defaultTTL || l.Holder != coord.DefaultHolder() {
		t.Errorf("zero options: TTL %v, holder %q; want at least %v, %q", l.TTL, l.Holder, defaultTTL, coord.DefaultHolder())
	}
	if info := inspect(t, c2, name); !info.Held || info.Token != l.Token || info.Holder != coord.DefaultHolder() || info.TTL < defaultTTL {
		t.Errorf("Inspect after a zero-options Acquire: %+v", info)
	}
	start := time.Now()
	_, err = c2.Acquire(ctx(t), name, coord.AcquireOptions{})
	wantErr(t, "zero-options Acquire of a held lock", err, coord.ErrBusy)
	if d := time.Since(start); d > guard/2 {
		t.Errorf("zero-options Acquire of a held lock took %v: it waited", d)
	}
	release(t, c1, l)
}

// cancelWhileWaiting: cancelling a waiter's context ends its Acquire with the
// context's error and takes it out of the queue; a context deadline is not
// ErrBusy.
func (s *suite) cancelWhileWaiting(t *testing.T) {
	name := s.name(t, "cancel")
	c0, c1, c2 := s.client(t), s.client(t), s.client(t)
	l := acquire(t, c0, name, coord.AcquireOptions{Holder: "holder"})

	cctx, cancel := context.WithCancel(ctx(t))
	defer cancel()
	q1, q2 := make(chan struct{}), make(chan struct{})
	ch1 := goAcquire(cctx, c1, name, coord.AcquireOptions{Holder: "cancelled", Wait: coord.WaitForever, OnWait: notify(q1)})
	signalled(t, q1, "first waiter queued")
	ch2 := goAcquire(ctx(t), c2, name, coord.AcquireOptions{Holder: "behind", Wait: coord.WaitForever, OnWait: notify(q2)})
	signalled(t, q2, "second waiter queued")
	cancel()
	cancelled := time.Now()
	r1 := await(t, ch1, "cancelled waiter")
	if !errors.Is(r1.err, context.Canceled) || errors.Is(r1.err, coord.ErrBusy) {
		t.Errorf("cancelled Acquire = %v, %v; want context.Canceled", r1.l, r1.err)
	}
	if d := r1.at.Sub(cancelled); d > 10*time.Second {
		t.Errorf("cancelled Acquire returned %v after the cancel", d)
	}
	release(t, c0, l)
	r2 := await(t, ch2, "waiter behind the cancelled one")
	if r2.err != nil {
		t.Fatalf("waiter behind a cancelled one: %v", r2.err)
	}
	if r2.l.Holder != "behind" || r2.l.Token <= l.Token {
		t.Errorf("after the holder released: holder %q token %d", r2.l.Holder, r2.l.Token)
	}
	wantHeldBy(t, c0, r2.l)

	// A context deadline while waiting, even with a longer Wait: the
	// context's error, not ErrBusy.
	for _, wait := range []time.Duration{coord.WaitForever, guard} {
		dctx, dcancel := context.WithTimeout(ctx(t), 200*time.Millisecond)
		_, err := acquireCtx(dctx, t, c1, name, coord.AcquireOptions{Holder: "deadline", Wait: wait})
		dcancel()
		if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, coord.ErrBusy) {
			t.Errorf("Acquire(wait %v) with a 200ms context = %v, want context.DeadlineExceeded", wait, err)
		}
	}
	release(t, c2, r2.l)
	l3 := acquire(t, c1, name, coord.AcquireOptions{Holder: "clean", Wait: 0})
	release(t, c1, l3)
}

// killedHolderKeepsLease: a holder process killed with SIGKILL whose lease
// has no process attached keeps the lease until its TTL.
func (s *suite) killedHolderKeepsLease(t *testing.T) {
	if s.h.Spawn == nil {
		t.Skip("no Spawn in the harness")
	}
	name := s.name(t, "killed")
	c := s.client(t)
	ttl := max(3*s.h.ShortTTL, 3*time.Second)
	p := s.spawn(t, nil, "hold", name, ttl.String())
	m := p.next(t, "acquired")
	p.kill(t)
	if _, err := tryAcquire(t, c, name, coord.AcquireOptions{Holder: "early", Wait: 0}); !errors.Is(err, coord.ErrBusy) {
		if left := m.Sent.Add(time.Duration(m.TTL)).Sub(clock.Now()); left > 0 {
			t.Fatalf("Acquire(no wait) %v before the killed holder's lease (no process attached) expires: %v, want ErrBusy", left, err)
		}
		t.Logf("machine too slow to check that the lease survives its holder: %v", err)
	}
	l := acquire(t, c, name, coord.AcquireOptions{Holder: "after", Wait: coord.WaitForever})
	if left := m.Sent.Add(time.Duration(m.TTL)).Sub(clock.Now()); left > 0 {
		t.Errorf("lease with no process attached taken over %v before its TTL ran out", left)
	}
	if l.Token <= m.Token {
		t.Errorf("token %d after the killed holder's %d", l.Token, m.Token)
	}
	release(t, c, l)
}

// deadWaiter: a waiting process killed with SIGKILL does not block the
// waiters behind it for good, and never holds the lock.
func (s *suite) deadWaiter(t *testing.T) {
	if s.h.Spawn == nil {
		t.Skip("no Spawn in the harness")
	}
	name := s.name(t, "dead-waiter")
	c0, c1 := s.client(t), s.client(t)
	l := acquire(t, c0, name, coord.AcquireOptions{Holder: "holder"})
	p := s.spawn(t, nil, "wait", name, s.h.ShortTTL.String())
	p.next(t, "queued")
	queued := make(chan struct{})
	ch := goAcquire(ctx(t), c1, name, coord.AcquireOptions{Holder: "behind-dead", Wait: coord.WaitForever, OnWait: notify(queued)})
	signalled(t, queued, "waiter behind the helper queued")
	p.kill(t)
	release(t, c0, l)
	r := await(t, ch, "waiter behind a dead waiter")
	if r.err != nil {
		t.Fatalf("waiter behind a dead waiter: %v", r.err)
	}
	if r.l.Token <= l.Token {
		t.Errorf("token %d after %d", r.l.Token, l.Token)
	}
	wantHeldBy(t, c0, r.l)
	release(t, c1, r.l)
}

// killedContenders: processes killed with SIGKILL at arbitrary points of
// acquiring and releasing (a crash at any instant) leave a lock that works,
// whose next token is above every token they were granted.
func (s *suite) killedContenders(t *testing.T) {
	if s.h.Spawn == nil {
		t.Skip("no Spawn in the harness")
	}
	const procs = 4
	name := s.name(t, "churn")
	dir := t.TempDir()
	c := s.client(t)
	var ps []*proc
	for i := 0; i < procs; i++ {
		p := s.spawn(t, nil, "churn", name, s.h.ShortTTL.String(), dir)
		p.next(t, "ready")
		ps = append(ps, p)
	}
	for i, p := range ps {
		time.Sleep(time.Duration(50+rand.IntN(150)) * time.Millisecond)
		if i == procs-1 {
			// The last one is stopped in the middle of whatever it does
			// while the others are already dead.
			_ = p.cmd.Process.Signal(syscall.SIGSTOP)
			time.Sleep(time.Duration(rand.IntN(100)) * time.Millisecond)
		}
		p.kill(t)
	}
	var highest uint64
	b, err := os.ReadFile(filepath.Join(dir, "tokens"))
	if err != nil {
		t.Fatalf("no tokens logged: %v", err)
	}
	n := 0
	for _, line := range strings.Fields(string(b)) {
		var tok uint64
		if _, err := fmt.Sscan(line, &tok); err != nil {
			t.Fatalf("bad token line %q", line)
		}
		highest, n = max(highest, tok), n+1
	}
	if _, err := c.Inspect(ctx(t), name); err != nil {
		t.Fatalf("Inspect after the contenders were killed: %v", err)
	}
	l := acquire(t, c, name, coord.AcquireOptions{Holder: "survivor", Wait: coord.WaitForever})
	if l.Token <= highest {
		t.Errorf("token %d after the killed contenders were granted up to %d", l.Token, highest)
	}
	release(t, c, l)
	t.Logf("%d grants to %d processes before they were killed", n, procs)
}
