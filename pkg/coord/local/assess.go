package local

import (
	"os"
	"slices"

	"github.com/fence-dev/fence/internal/proc"
	"github.com/fence-dev/fence/pkg/clock"
	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/internal/coordkit"
)

// verdict is what a lock's holder means for readers and successors, as of
// one instant.
type verdict struct {
	// live: the lease is held (not expired, revoked or abandoned); it can be
	// renewed and is shown as the holder.
	live bool
	// free: a successor may take the lock now.
	free bool
	// kill: the lease ended but its command's process group still has
	// members (group): a successor must stop them before taking over.
	kill  bool
	pgid  int
	group []proc.ID
	// The verdict may change at until (0: not by time) or when one of
	// waitOn exits.
	until  clock.Boot
	waitOn []proc.ID
	// why the lease is not live (for ErrLeaseLost messages).
	why string
}

// assess judges the holder h at now. It reads /proc for attached leases.
func assess(h *holder, now clock.Boot) (verdict, error) { return judge(h, now, sysFacts{}) }

// procFacts are what judging a holder reads of its processes, each a
// reading of /proc (sysFacts), given apart so that the judgement can be
// tested branch by branch on facts of a test's making.
type procFacts interface {
	// ours reports whether h's processes were recorded in our PID
	// namespace, where they can be checked.
	ours(h *holder) bool
	// alive reports whether the process runs (or is stopped).
	alive(id proc.ID) bool
	// groupMembers lists the live members of the process group led (or
	// once led) by group.
	groupMembers(group proc.ID) ([]proc.ID, error)
	// descendants lists the live descendants of the supervisors sup, but
	// not the supervisors themselves nor this process.
	descendants(sup []proc.ID) ([]proc.ID, error)
}

// sysFacts reads the facts from /proc.
type sysFacts struct{}

func (sysFacts) ours(h *holder) bool                          { return h.ours() }
func (sysFacts) alive(id proc.ID) bool                        { return id.Alive() }
func (sysFacts) groupMembers(g proc.ID) ([]proc.ID, error)    { return proc.GroupMembers(g.PID, g) }
func (sysFacts) descendants(sup []proc.ID) ([]proc.ID, error) { return descendantsOf(sup) }

// judge judges the holder h at now on the facts f.
func judge(h *holder, now clock.Boot, f procFacts) (verdict, error) {
	if h == nil {
		return verdict{free: true, why: "was released"}, nil
	}
	expired := now >= h.ExpiresAt
	if !f.ours(h) {
		return byTTL(h, expired), nil
	}
	var sup []proc.ID // live supervising processes
	for _, id := range h.PIDs {
		if f.alive(id) {
			sup = append(sup, id)
		}
	}
	var members []proc.ID
	if h.Group != nil && (len(sup) == 0 || expired || h.Revoked) {
		m, err := f.groupMembers(*h.Group)
		if err != nil {
			return verdict{}, unavailable("cannot read the processes of process group %d: %v", h.Group.PID, err)
		}
		members = m
	}
	if h.attached() && len(sup) == 0 && len(members) == 0 {
		return verdict{free: true, why: "was abandoned: its processes are gone"}, nil
	}
	if !expired && !h.Revoked {
		v := verdict{live: true, until: h.ExpiresAt, waitOn: sup}
		if len(sup) == 0 {
			v.waitOn = members
		}
		return v, nil
	}
	return ended(h, expired, sup, members, f)
}

// byTTL judges a holder whose processes are of another PID namespace: the
// TTL alone counts.
func byTTL(h *holder, expired bool) verdict {
	switch {
	case h.Revoked:
		return verdict{free: true, why: "was revoked"}
	case expired:
		return verdict{free: true, why: "expired"}
	}
	return verdict{live: true, until: h.ExpiresAt}
}

// ended judges a lease that expired or was revoked, whose live supervisors
// are sup and whose command's group has members: the successor must stop
// what is left of its command, wait for its supervisors to do it, or may go.
func ended(h *holder, expired bool, sup, members []proc.ID, f procFacts) (verdict, error) {
	why := "expired"
	if h.Revoked {
		why = "was revoked"
	}
	if len(members) > 0 {
		if expired || len(sup) == 0 {
			return verdict{kill: true, pgid: h.Group.PID, group: members, waitOn: members, why: why}, nil
		}
		// Revoked, its supervisors still run: they get until the TTL to stop
		// their command themselves.
		return verdict{until: h.ExpiresAt, waitOn: append(sup, members...), why: why}, nil
	}
	if h.Group != nil || len(sup) == 0 {
		return verdict{free: true, why: why}, nil
	}
	if !expired {
		// Revoked before its command's group was attached: the supervisor
		// may be starting the command right now.
		return verdict{until: h.ExpiresAt, waitOn: sup, why: why}, nil
	}
	// Ended before its command's group was recorded while its supervisors
	// live on (frozen, as a rule): the command may have been started just
	// before, as their descendant. Those processes are stopped like a
	// recorded group.
	cmd, err := f.descendants(sup)
	if err != nil {
		return verdict{}, unavailable("cannot read the processes started by the lease's supervisors: %v", err)
	}
	if len(cmd) > 0 {
		return verdict{kill: true, group: cmd, waitOn: cmd, why: why}, nil
	}
	return verdict{free: true, why: why}, nil
}

// descendantsOf lists the live descendants of the supervisors sup, except
// the supervisors themselves (fence's watchdog is fence's child) and this
// process.
func descendantsOf(sup []proc.ID) ([]proc.ID, error) {
	skip := map[int]bool{os.Getpid(): true}
	for _, s := range sup {
		skip[s.PID] = true
	}
	var out []proc.ID
	for _, s := range sup {
		ds, err := proc.Descendants(s.PID)
		if err != nil {
			return nil, err
		}
		for _, d := range ds {
			if !skip[d.PID] && !d.Gone() {
				skip[d.PID] = true
				out = append(out, d.ID())
			}
		}
	}
	return out, nil
}

// liveTicket reports whether a waiter's process is alive (running or
// stopped) and, for this process's tickets, whether its Acquire still runs.
func liveTicket(t ticket, self proc.ID) proc.Status {
	if t.PIDNS != proc.PIDNamespace() {
		// A waiter of another PID namespace cannot be checked from here: it
		// keeps its place, is passed over, and is dropped only by a process
		// of its own namespace.
		return proc.Stopped
	}
	if t.proc() == self {
		if _, ok := liveTickets.Load(t.ID); ok {
			return proc.Running
		}
		return proc.Gone
	}
	return proc.Check(t.proc())
}

// queuePos describes the queue from one waiter's point of view.
type queuePos struct {
	head int     // index of the first running waiter, -1 when none
	mine int     // index of my ticket, -1 when absent
	rank int     // running waiters ahead of mine (capped at 2; 0 when absent)
	pred proc.ID // the nearest live waiter ahead of mine in another process
}

func position(q []ticket, myID string, self proc.ID) queuePos {
	p := queuePos{head: -1, mine: -1}
	if myID != "" {
		p.mine = slices.IndexFunc(q, func(t ticket) bool { return t.ID == myID })
	}
	ahead := q
	if p.mine >= 0 {
		ahead = q[:p.mine]
	}
	for i, t := range ahead {
		if liveTicket(t, self) != proc.Running {
			continue
		}
		if p.head < 0 {
			p.head = i
		}
		if p.mine < 0 {
			break
		}
		if p.rank++; p.rank == 2 {
			break
		}
	}
	if p.head < 0 {
		p.head = p.mine
	}
	for i := p.mine - 1; i >= 0; i-- {
		if t := q[i]; t.proc() != self && t.PIDNS == proc.PIDNamespace() && proc.Check(t.proc()) != proc.Gone {
			p.pred = t.proc()
			break
		}
	}
	return p
}

// info is the LockInfo of st as judged at now (w). Its queue is the live
// waiters (every ticket whose process is not gone), in order.
func info(st *state, w lockView, now clock.Boot, self proc.ID) coord.LockInfo {
	li := coord.LockInfo{Name: st.Name, LastToken: st.LastToken}
	for _, t := range st.Queue {
		if liveTicket(t, self) != proc.Gone {
			li.Queue = append(li.Queue, coord.Waiter{Holder: t.Holder, Since: t.Since, PID: t.PID})
		}
	}
	li.Waiters = len(li.Queue)
	var hs []coord.HolderInfo
	for _, h := range w.live {
		hs = append(hs, holderInfo(h, now))
	}
	slots := 0
	if len(hs) > 0 || li.Waiters > 0 {
		slots = st.Slots
	}
	coordkit.SetHolders(&li, slots, hs)
	return li
}
