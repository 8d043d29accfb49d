package coordtest

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/internal/coordkit"
)

// slots: a lock taken with Slots 3 has up to three holders at once, each
// in the lowest free slot with its own token, strictly increasing across
// the lock; a fourth is busy; readers list every holder, oldest first; a
// freed slot goes to the first waiter, in queue order.
func (s *suite) slots(t *testing.T) {
	const n = 3
	name := s.name(t, "sem")
	c := s.client(t)
	opts := func(h string) coord.AcquireOptions { return coord.AcquireOptions{Holder: h, Slots: n} }
	var ls []*coord.Lease
	for i := range n {
		l, err := tryAcquire(t, s.client(t), name, opts(fmt.Sprintf("h%d", i)))
		if err != nil {
			t.Fatalf("Acquire %d of %d slots (no wait): %v", i+1, n, err)
		}
		if l.Slot != i {
			t.Errorf("holder %d got slot %d, want %d (the lowest free)", i, l.Slot, i)
		}
		if i > 0 && l.Token <= ls[i-1].Token {
			t.Errorf("holder %d got token %d after %d: tokens must grow across the lock", i, l.Token, ls[i-1].Token)
		}
		ls = append(ls, l)
	}
	if l, err := tryAcquire(t, s.client(t), name, opts("over")); err == nil {
		t.Fatalf("Acquire beyond %d slots granted slot %d token %d", n, l.Slot, l.Token)
	} else {
		wantErr(t, "Acquire beyond the slots", err, coord.ErrBusy)
	}
	info := inspect(t, c, name)
	wantHolders(t, info, n, ls...)

	// The middle slot frees: the next holder takes it, with a new token.
	release(t, s.client(t), ls[1])
	wantHolders(t, inspect(t, c, name), n, ls[0], ls[2])
	l, err := tryAcquire(t, s.client(t), name, opts("again"))
	if err != nil {
		t.Fatalf("Acquire after a holder of a full semaphore left: %v", err)
	}
	if l.Slot != 1 || l.Token <= ls[2].Token {
		t.Errorf("after slot 1 was released: got slot %d token %d; want slot 1 and a token above %d", l.Slot, l.Token, ls[2].Token)
	}
	ls[1] = l

	// Waiters are served in order, each taking the slot just freed.
	cx := ctx(t)
	const waiters = 3
	chans := make([]<-chan result, waiters)
	for i := range chans {
		queued := make(chan struct{})
		o := opts(fmt.Sprintf("w%d", i))
		o.Wait, o.OnWait = coord.WaitForever, notify(queued)
		chans[i] = goAcquire(cx, s.client(t), name, o)
		signalled(t, queued, fmt.Sprintf("waiter %d queued", i))
	}
	if info := inspect(t, c, name); info.Waiters != waiters {
		t.Errorf("Inspect with %d waiters on a full semaphore: Waiters = %d", waiters, info.Waiters)
	}
	last := ls[1].Token
	for i, free := range []int{2, 0, 1} {
		release(t, s.client(t), ls[free])
		r := await(t, chans[i], fmt.Sprintf("waiter %d after slot %d was released", i, free))
		if r.err != nil {
			t.Fatalf("waiter %d: %v", i, r.err)
		}
		if r.l.Slot != free || r.l.Token <= last {
			t.Errorf("waiter %d: slot %d token %d; want slot %d (the one freed) and a token above %d", i, r.l.Slot, r.l.Token, free, last)
		}
		last = r.l.Token
		ls[free] = r.l
		for j := i + 1; j < waiters; j++ {
			select {
			case r := <-chans[j]:
				t.Fatalf("waiter %d returned (%v) before waiter %d's turn: FIFO broken", j, r.err, i+1)
			default:
			}
		}
	}
	wantHolders(t, inspect(t, c, name), n, ls[0], ls[1], ls[2])

	// One holder among several is named by its token.
	if _, err := c.Revoke(ctx(t), name); !errors.Is(err, coord.ErrInvalid) {
		t.Errorf("Revoke with no token of a lock with %d holders: %v; want ErrInvalid naming the tokens", n, err)
	}
	for _, l := range ls {
		release(t, s.client(t), l)
	}
	if info := inspect(t, c, name); info.Held || len(info.Holders) != 0 {
		t.Errorf("Inspect after every holder released: held %v, %d holders", info.Held, len(info.Holders))
	}
}

// wantHolders checks that info shows exactly the leases ls (in any order
// given) as the holders of a semaphore of n slots, oldest first.
func wantHolders(t testing.TB, info coord.LockInfo, n int, ls ...*coord.Lease) {
	t.Helper()
	want := slices.Clone(ls)
	slices.SortFunc(want, func(a, b *coord.Lease) int { return int(a.Token) - int(b.Token) })
	ok := info.Held && info.Slots == n && len(info.Holders) == len(want) && info.Token == want[0].Token && info.LeaseID == want[0].ID
	for i := 0; ok && i < len(want); i++ {
		h := info.Holders[i]
		ok = h.Token == want[i].Token && h.LeaseID == want[i].ID && h.Slot == want[i].Slot && h.Holder == want[i].Holder
	}
	if !ok {
		var got, exp []string
		for _, h := range info.Holders {
			got = append(got, fmt.Sprintf("slot %d token %d %s", h.Slot, h.Token, h.Holder))
		}
		for _, l := range want {
			exp = append(exp, fmt.Sprintf("slot %d token %d %s", l.Slot, l.Token, l.Holder))
		}
		t.Errorf("Inspect of a semaphore: held %v, slots %d, token %d, holders %q; want slots %d, token %d, holders %q",
			info.Held, info.Slots, info.Token, got, n, want[0].Token, exp)
	}
	for _, l := range want {
		if _, ok := coordkit.HeldBy(info, l.Token); !ok {
			t.Errorf("LockInfo.HeldBy(%d) is false for a live holder", l.Token)
		}
	}
}

// slotsMixed: while a lock has holders or waiters, an Acquire with other
// Slots is refused with a *SlotsError (ErrInvalid) naming both, and does
// not queue; an idle lock takes the slots of its next caller.
func (s *suite) slotsMixed(t *testing.T) {
	name := s.name(t, "mixed")
	c := s.client(t)
	h := acquire(t, c, name, coord.AcquireOptions{Holder: "three", Slots: 3})
	for _, want := range []int{0, 1, 2} {
		o := coord.AcquireOptions{Holder: "other", Slots: want, Wait: shortWait}
		l, err := tryAcquire(t, s.client(t), name, o)
		var se *coordkit.SlotsError
		switch {
		case err == nil:
			release(t, c, l)
			t.Errorf("Acquire with slots %d of a lock held with slots 3 granted token %d", want, l.Token)
		case !errors.Is(err, coord.ErrInvalid) || !errors.As(err, &se) || se.Have != 3 || se.Want != coordkit.SlotsOf(want):
			t.Errorf("Acquire with slots %d of a lock held with slots 3: %v; want a *coordkit.SlotsError (ErrInvalid) with 3 and %d", want, err, coordkit.SlotsOf(want))
		}
	}
	if info := inspect(t, c, name); info.Waiters != 0 || len(info.Holders) != 1 {
		t.Errorf("after the refusals: %d waiters, %d holders; want 0 and 1 (a refused caller does not queue)", info.Waiters, len(info.Holders))
	}
	release(t, c, h)
	// Idle: the next caller's slots.
	p := acquire(t, c, name, coord.AcquireOptions{Holder: "plain"})
	if p.Slot != 0 {
		t.Errorf("a plain lock's holder got slot %d", p.Slot)
	}
	if _, err := tryAcquire(t, s.client(t), name, coord.AcquireOptions{Holder: "two", Slots: 2}); !errors.Is(err, coord.ErrInvalid) {
		t.Errorf("Acquire with slots 2 of a plain lock's holder: %v; want ErrInvalid", err)
	}
	release(t, c, p)
}

// slotsLimit: an operator limit caps the holders of a semaphore below its
// slots: limit 1 on 3 slots lets one hold at a time, a freeze none, and
// raising the limit lets the waiters in, in order.
func (s *suite) slotsLimit(t *testing.T) {
	name := s.name(t, "semlimit")
	c := s.client(t)
	lim := limiter(t, c)
	setLimit(t, lim, coord.Limit{Name: name, Max: 1, Reason: "serial", By: "ops"})
	defer lim.ClearLimit(ctx(t), name, false)
	o := coord.AcquireOptions{Holder: "first", Slots: 3}
	first := acquire(t, c, name, o)
	o.Holder = "second"
	_, err := tryAcquire(t, s.client(t), name, o)
	var le *coordkit.LimitError
	if !errors.As(err, &le) || le.Limit.Max != 1 || le.Holders != 1 {
		t.Fatalf("second try-lock of a 3-slot lock under limit 1: %v; want a *coordkit.LimitError with 1 holder", err)
	}
	cx := ctx(t)
	queued := make(chan struct{})
	o.Wait, o.OnWait = coord.WaitForever, notify(queued)
	w := goAcquire(cx, s.client(t), name, o)
	signalled(t, queued, "waiter queued")
	select {
	case r := <-w:
		t.Fatalf("a waiter of a 3-slot lock under limit 1 got in beside its holder (%v)", r.err)
	case <-afterShort():
	}
	setLimit(t, lim, coord.Limit{Name: name, Max: 2, By: "ops"})
	r := await(t, w, "waiter after the limit went to 2")
	if r.err != nil {
		t.Fatalf("waiter after the limit went to 2: %v", r.err)
	}
	if r.l.Slot != 1 {
		t.Errorf("second holder got slot %d, want 1", r.l.Slot)
	}
	wantHolders(t, inspect(t, c, name), 3, first, r.l)
	setLimit(t, lim, coord.Limit{Name: name, Max: 0, By: "ops"})
	release(t, c, first)
	o.Wait, o.OnWait, o.Holder = 0, nil, "frozen"
	if _, err := tryAcquire(t, s.client(t), name, o); !errors.As(err, &le) || le.Limit.Max != 0 {
		t.Errorf("try-lock of a frozen 3-slot lock with a free slot: %v; want a *coordkit.LimitError (frozen)", err)
	}
	release(t, c, r.l)
}

// shortWait is how long the slot cases let a refused caller wait, and how
// long they watch for a grant that must not come.
const shortWait = 300 * time.Millisecond

func afterShort() <-chan time.Time { return time.After(shortWait) }

// slotsBurst: when every holder of a full semaphore leaves at once, the
// freed slots go to the first waiters in line, and the next ones only as
// those leave: grants are first come, first served, and their tokens grow
// in that order (a backend whose token is fixed when the waiter queues, as
// etcd's create revision is, must grant in queue order for that).
func (s *suite) slotsBurst(t *testing.T) {
	const n, waiters = 3, 6
	name := s.name(t, "burst")
	var holders []*coord.Lease
	for i := range n {
		holders = append(holders, acquire(t, s.client(t), name, coord.AcquireOptions{Holder: fmt.Sprintf("h%d", i), Slots: n}))
	}
	cx := ctx(t)
	chans := make([]<-chan result, waiters)
	for i := range chans {
		queued := make(chan struct{})
		chans[i] = goAcquire(cx, s.client(t), name, coord.AcquireOptions{Holder: fmt.Sprintf("w%d", i), Slots: n,
			Wait: coord.WaitForever, OnWait: notify(queued)})
		signalled(t, queued, fmt.Sprintf("waiter %d queued", i))
	}
	var last uint64
	for round := range waiters / n {
		// All at once.
		var wg sync.WaitGroup
		for _, l := range holders {
			wg.Go(func() { release(t, s.client(t), l) })
		}
		wg.Wait()
		holders = holders[:0]
		for i := round * n; i < (round+1)*n; i++ {
			r := await(t, chans[i], fmt.Sprintf("waiter %d, in round %d", i, round))
			if r.err != nil {
				t.Fatalf("waiter %d: %v", i, r.err)
			}
			if r.l.Token <= last {
				t.Errorf("waiter %d got token %d after a waiter ahead of it got %d: grants out of queue order", i, r.l.Token, last)
			}
			last = r.l.Token
			holders = append(holders, r.l)
		}
		for j := (round + 1) * n; j < waiters; j++ {
			select {
			case r := <-chans[j]:
				t.Fatalf("waiter %d (token %d) got in while waiters %d..%d, ahead of it, took the %d freed slots", j, r.l.Token, round*n, (round+1)*n-1, n)
			case <-afterShort():
			}
		}
	}
	for _, l := range holders {
		release(t, s.client(t), l)
	}
}

// slotsChurn: workers that take and leave a semaphore in a loop, from
// clients of their own: never more than its slots hold at once, a slot has
// one holder at a time, and each slot's tokens grow from holder to holder
// (the holder before checked in before it released, so the next one's
// token must be larger: a grant out of queue order gives a newcomer a
// token its predecessor in the slot may exceed, on a backend whose token
// is fixed at queueing).
func (s *suite) slotsChurn(t *testing.T) {
	const n, workers, rounds = 3, 8, 12
	name := s.name(t, "churn")
	var (
		mu      sync.Mutex
		inside  = map[int]uint64{} // slot -> token
		lastTok = map[int]uint64{}
		most    int
	)
	cx := ctx(t)
	var wg sync.WaitGroup
	for w := range workers {
		c := s.client(t)
		wg.Go(func() {
			for r := range rounds {
				l, err := acquireCtx(cx, t, c, name, coord.AcquireOptions{Holder: fmt.Sprintf("w%d.%d", w, r), Slots: n, Wait: coord.WaitForever})
				if err != nil {
					t.Errorf("worker %d round %d: %v", w, r, err)
					return
				}
				mu.Lock()
				if tok, ok := inside[l.Slot]; ok {
					t.Errorf("token %d got slot %d while token %d held it", l.Token, l.Slot, tok)
				}
				if l.Slot < 0 || l.Slot >= n {
					t.Errorf("token %d got slot %d of %d", l.Token, l.Slot, n)
				}
				if l.Token <= lastTok[l.Slot] {
					t.Errorf("token %d got slot %d after token %d held it: a slot's tokens must grow", l.Token, l.Slot, lastTok[l.Slot])
				}
				inside[l.Slot], lastTok[l.Slot] = l.Token, l.Token
				most = max(most, len(inside))
				if len(inside) > n {
					t.Errorf("%d holders of a semaphore of %d slots", len(inside), n)
				}
				mu.Unlock()
				if r == 0 {
					// The first holds wait (2 s at most) until two are in
					// at once, so that the churn below runs with several
					// holders however slowly grants come (-race): a
					// backend that grants one at a time still fails below.
					for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
						mu.Lock()
						two := most >= 2
						mu.Unlock()
						if two {
							break
						}
					}
				}
				time.Sleep(time.Duration(r%3) * time.Millisecond)
				mu.Lock()
				delete(inside, l.Slot)
				mu.Unlock()
				if err := c.Release(cx, name, l.ID); err != nil {
					t.Errorf("Release: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	t.Logf("%d workers x %d rounds on %d slots: at most %d held at once", workers, rounds, n, most)
	if most < 2 {
		t.Errorf("%d workers on %d slots were never 2 holders at once", workers, n)
	}
}
