package local

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fence-dev/fence/internal/proc"
)

// Doorbells. A waiter creates an empty file, its doorbell, in the state
// directory's waiters/ (0700) and watches it with inotify before its ticket
// enters the queue. Whoever ends a holder or takes a ticket out of the queue
// rings (writes one byte to) the doorbells of the first two running waiters
// of the queue as it left it: the first may take the lock; the second
// watches that it does (it takes over if the first was stopped). The other
// waiters sleep on and are not woken by the handoff: each wakes when the
// waiter ahead of it exits, or when its own doorbell rings. A doorbell is
// named after its ticket, "<pidns>-<pid>-<start>-<ticket id>", and removed by
// its waiter; those of waiters that died are removed by the next waiter of
// this PID namespace to create one.
//
// A waiter that takes the lock rings the queue it left ringDelay later
// (ringSoon), not at once: the two waiters it wakes read and judge the state
// and sleep again, and on a small host that work competed with the new
// holder's start (the handoff at 8 waiters took 1.1-1.2x as long). The ring
// is not lost: Close rings what is pending, and a release of the lock in the
// meantime rings the queue itself, so the pending ring is dropped. Until it
// comes, the new first waiter follows the new holder's processes (it was
// watching them as the waiter ahead), and the one after it only the first:
// for those ringDelay, a holder that dies while the first waiter is stopped
// is noticed by nobody until that waiter resumes.

// bellName is the file name of the doorbell of ticket t.
func bellName(t ticket) string {
	return fmt.Sprintf("%s-%d-%d-%s", nsNumber(t.PIDNS), t.PID, t.Start, t.ID)
}

// nsNumber is the number of a PID namespace as proc.PIDNamespace writes it
// ("pid:[4026531836]"), or "0".
func nsNumber(ns string) string {
	n := strings.TrimSuffix(strings.TrimPrefix(ns, "pid:["), "]")
	if _, err := strconv.ParseUint(n, 10, 64); err != nil {
		return "0"
	}
	return n
}

// bell is a waiter's doorbell.
type bell struct {
	id   string // the ticket ID
	path string
	sub  *subscription
}

// newBell creates a doorbell for a new ticket of process self and
// subscribes to it.
func (c *Coordinator) newBell(self proc.ID) (*bell, error) {
	t := ticket{ID: newTicketID(), PID: self.PID, Start: self.Start, PIDNS: proc.PIDNamespace()}
	path := filepath.Join(c.waitersDir, bellName(t))
	for retry := true; ; retry = false {
		if err := c.prepareWaiters(); err != nil {
			return nil, err
		}
		fd, err := unix.Open(path, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NOCTTY, 0o600)
		if errors.Is(err, unix.ENOENT) && retry {
			// waiters/ was removed since it was checked: make it again.
			c.mu.Lock()
			c.waitersReady = false
			c.mu.Unlock()
			continue
		}
		if err != nil {
			return nil, unavailable("cannot create waiter file %s: %v", path, err)
		}
		err = c.share.created(fd) // others of a shared directory's group ring it
		unix.Close(fd)
		if err != nil {
			os.Remove(path)
			return nil, unavailable("cannot set the mode of waiter file %s: %v", path, err)
		}
		break
	}
	h, err := c.getHub()
	if err != nil {
		os.Remove(path)
		return nil, err
	}
	return &bell{id: t.ID, path: path, sub: h.subscribeFile(path)}, nil
}

func (b *bell) close() {
	b.sub.close()
	os.Remove(b.path)
}

// prepareWaiters makes sure waiters/ exists (0700), once per Coordinator,
// and removes the doorbells of dead waiters of this PID namespace.
func (c *Coordinator) prepareWaiters() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.waitersReady {
		return nil
	}
	if _, err := c.ensureDir(c.waitersDir, false); err != nil {
		return err
	}
	c.waitersReady = true
	ents, err := os.ReadDir(c.waitersDir)
	if err != nil {
		return nil
	}
	ns := nsNumber(proc.PIDNamespace())
	for _, e := range ents {
		f := strings.SplitN(e.Name(), "-", 4)
		if len(f) != 4 || f[0] != ns || ns == "0" {
			continue
		}
		pid, err1 := strconv.Atoi(f[1])
		start, err2 := strconv.ParseUint(f[2], 10, 64)
		if err1 != nil || err2 != nil {
			continue
		}
		if proc.Check(proc.ID{PID: pid, Start: start}) == proc.Gone {
			os.Remove(filepath.Join(c.waitersDir, e.Name()))
		}
	}
	return nil
}

// removeBell removes the doorbell of a dead waiter's ticket.
func (c *Coordinator) removeBell(t ticket) {
	os.Remove(filepath.Join(c.waitersDir, bellName(t)))
}

// ring wakes the waiters of queue q that may have to act: the first two
// running ones, and any stopped (or unverifiable) ones before them.
func (c *Coordinator) ring(q []ticket) {
	if len(q) == 0 {
		return
	}
	self, err := selfID()
	if err != nil {
		return
	}
	running := 0
	for _, t := range q {
		s := liveTicket(t, self)
		if s == proc.Gone {
			continue
		}
		c.ringBell(t)
		if s == proc.Running {
			if running++; running == 2 {
				return
			}
		}
	}
}

// ringDelay is how long after a grant its Coordinator rings the waiters
// behind the new holder.
const ringDelay = 20 * time.Millisecond

// pendingRing is a ring of the waiters behind a new holder, due ringDelay
// after its grant.
type pendingRing struct {
	timer *time.Timer
	queue []ticket
}

// ringSoon rings the first waiters of q, the queue a grant of lock name
// left, ringDelay from now; at once when c is closed. A later grant of the
// same lock by c replaces it.
func (c *Coordinator) ringSoon(name string, q []ticket) {
	c.mu.Lock()
	if c.checkOpen() != nil {
		c.mu.Unlock()
		c.ring(q)
		return
	}
	if p, ok := c.pending[name]; ok {
		p.timer.Stop()
	}
	var p *pendingRing
	p = &pendingRing{queue: q, timer: time.AfterFunc(ringDelay, func() {
		c.mu.Lock()
		due := c.pending[name] == p
		if due {
			delete(c.pending, name)
		}
		c.mu.Unlock()
		if due {
			c.ring(q)
		}
	})}
	if c.pending == nil {
		c.pending = map[string]*pendingRing{}
	}
	c.pending[name] = p
	c.mu.Unlock()
}

// dropRing drops the pending ring of lock name: its release rings the queue
// as it is then.
func (c *Coordinator) dropRing(name string) {
	c.mu.Lock()
	if p, ok := c.pending[name]; ok {
		p.timer.Stop()
		delete(c.pending, name)
	}
	c.mu.Unlock()
}

// flushRings rings every pending ring now (Close). A timer that fired
// meanwhile finds its ring no longer pending and leaves it to this.
func (c *Coordinator) flushRings() {
	c.mu.Lock()
	pending := c.pending
	c.pending = nil
	c.mu.Unlock()
	for _, p := range pending {
		p.timer.Stop()
		c.ring(p.queue)
	}
}

// ringBell writes one byte to the doorbell of t; a doorbell that is gone
// (its waiter is done) or is not a regular file of ours is left alone.
func (c *Coordinator) ringBell(t ticket) {
	path := filepath.Join(c.waitersDir, bellName(t))
	fd, err := unix.Open(path, unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK|unix.O_NOCTTY, 0)
	if err != nil {
		return
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG || c.share.checkFileStat("waiter file", path, -1, &st) != nil {
		return
	}
	if _, err := unix.Pwrite(fd, []byte{'!'}, 0); err != nil && !errors.Is(err, unix.EINTR) {
		return
	}
}
