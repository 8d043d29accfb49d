package supervise

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fence-dev/fence/internal/proc"
	"github.com/fence-dev/fence/pkg/clock"
	"github.com/fence-dev/fence/pkg/coord"
)

// WatchdogArg is the hidden first argument that makes the fence binary run
// as the watchdog of a `fence run`: cli.Main dispatches
// os.Args[1] == WatchdogArg to WatchdogMain before any flag parsing.
const WatchdogArg = "__watchdog"

// recheck is the longest the watchdog sleeps between two readings of the
// boot clock. Go timers run on CLOCK_MONOTONIC, which stops while the system
// is suspended; the periodic reading of CLOCK_BOOTTIME bounds how long the
// command may run after a resume past its stop time.
const recheck = 100 * time.Millisecond

// Faults that only tests inject (export_test.go sets them in the test
// binary, which is also the tests' watchdog): freezeBeforeReport runs
// after the command started and before it is reported; freezeAfterLook
// once, right after the first look for the command's exit that found it
// running (a freeze between that look and the judging of the stop time).
var freezeBeforeReport, freezeAfterLook func()

// cgroupPrefix starts the name of every cgroup a watchdog makes:
// fence-run-<the watchdog's PID>-<CLOCK_BOOTTIME ns when it made it>
// (sweepCgroups reads both back).
const cgroupPrefix = "fence-run-"

// sweep is the pause between two passes that kill what is left of the
// command's tree.
const sweep = 5 * time.Millisecond

// endTimeout bounds the watchdog's ending of the leases when fence is gone
// (opening the coordinator included): then it exits anyway, and the leases
// expire at their TTL.
const endTimeout = 5 * time.Second

// LeaseEnder ends leases for the watchdog when fence is gone: it opens the
// coordinator that coordinator describes (Handover.Coordinator's settings,
// opaque to this package) and releases each lease, in order, within ctx.
type LeaseEnder func(ctx context.Context, coordinator []byte, leases []coord.Lease) error

// WatchdogMain runs the watchdog: the process between fence and the command
// (what it does, and when it may end the leases with end: see the package
// doc). args are the arguments after WatchdogArg (a leading WatchdogArg is
// skipped). It reads orders from fd 3 and writes reports to fd 4 (see
// protocol.go), and returns its exit code: 0 when it did its job (however
// the command ended), 125 when it could not.
func WatchdogMain(args []string, end LeaseEnder) int {
	if len(args) > 0 && args[0] == WatchdogArg {
		args = args[1:]
	}
	if len(args) != 0 || !isPipe(3) || !isPipe(4) {
		fmt.Fprintln(os.Stderr, "fence: "+WatchdogArg+" is used internally by fence run")
		return 125
	}
	// The main goroutine starts the command and must stay on one thread:
	// the command's parent-death signal is tied to the thread that forked.
	runtime.LockOSThread()
	// Neither pipe may reach the command.
	unix.CloseOnExec(3)
	unix.CloseOnExec(4)
	repf := os.NewFile(4, "fence-reports")
	out := json.NewEncoder(repf)
	orders, err := newOrderPipe(3)
	if err != nil {
		_ = out.Encode(report{Ev: evError, Msg: "order pipe: " + err.Error(), At: clock.Now()})
		return 125
	}
	w := &watchdog{orders: orders, out: out, self: os.Getpid(), end: end}
	if err := w.run(); err != nil {
		_ = out.Encode(report{Ev: evError, Msg: err.Error(), At: clock.Now()})
		return 125
	}
	return 0
}

func isPipe(fd int) bool {
	var st unix.Stat_t
	return unix.Fstat(fd, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFIFO
}

type watchdog struct {
	orders *orderPipe
	out    *json.Encoder // the reports; the watchdog writes from one goroutine
	self   int
	sp     *spec
	cg     *cgroup
	leader int // the command's PID = its PGID

	// Found before the start order: the cgroup v2 the command's cgroup is
	// made in ("": none).
	cgBase string

	// phase: waiting for the start order, running the command, stopping
	// it (or, once it ended on its own, what it left), killing what is
	// left, done.
	phase       phase
	leaseStop   clock.Boot
	stopping    string     // reason of the stop sequence, "" before and when the command ended on its own
	killAt      clock.Boot // SIGKILL time once stopping
	sweeps      int        // SIGKILL passes so far
	emptyChecks int        // looks for an empty tree since the command ended
	childless   bool       // the last reap found no child left
	exit        *exitInfo  // the command's status, once reaped
	leftovers   int
	foreground  bool

	end       LeaseEnder // ends the leases when fence is gone; nil: none
	fenceGone bool       // the order pipe ended while the command's tree lived
}

// run gets ready to start the command while fence acquires the lock
// (become the subreaper of its tree, find where its cgroup goes), waits for
// the start order, starts the command and watches it.
func (w *watchdog) run() error {
	// Signals sent to the watchdog by PID (pkill fence) are caught and
	// dropped: fence forwards what the command should get. Caught, not
	// ignored, so that the command starts with them at default, except
	// those fence itself found ignored (spec.Ignore, applied below). SIGPIPE
	// too: fence's stderr may be a pipe that closed with fence, and the line
	// saying a lease could not be ended must not kill the watchdog (Go
	// kills a process writing to a broken fd 1 or 2 unless it is caught).
	sigs := make(chan os.Signal, 8)
	chld := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT,
		syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU, syscall.SIGPIPE)
	signal.Notify(chld, syscall.SIGCHLD)
	subreaper := becomeSubreaper()
	w.cgBase, _ = ownCgroupDir()

	later := w.waitStart()
	if w.phase == phaseDone {
		return nil
	}
	w.leaseStop = w.sp.LeaseStop
	for _, s := range w.sp.Ignore {
		signal.Ignore(syscall.Signal(s))
	}
	if subreaper != nil {
		return fmt.Errorf("become a child subreaper: %w", subreaper)
	}
	if err := w.start(); err != nil || w.leader == 0 {
		return err // no leader: exec failed and was reported
	}
	w.phase = w.phase.next(stepStart)
	for _, o := range later {
		w.order(o)
	}
	if w.cg != nil {
		// The command runs: remove what killed watchdogs left, beside it
		// rather than on the way to it.
		sweepCgroups(w.cgBase, w.self)
	}
	return w.watch(sigs, chld)
}

// watch supervises the running command until its whole tree is gone:
// reaps, takes fence's orders, acts on the stop time, and sleeps until
// the next thing to do (a child, a signal, an order or the schedule).
func (w *watchdog) watch(sigs, chld <-chan os.Signal) error {
	ready := w.orders.ready // the orders are taken at the top of the loop
	afterLook := freezeAfterLook
	for {
		w.reap()
		if afterLook != nil && w.exit == nil {
			afterLook()
			afterLook = nil
		}
		if done, err := w.doneIfGone(); done {
			return err
		}
		now := clock.Now()
		// Every order sent before now is taken before the stop time is
		// judged (see orderPipe).
		if ready != nil && w.takeOrders() {
			ready = nil
		}
		w.act(now)

		// Sleep until the next thing to do, reading the boot clock at
		// least every recheck.
		wake := nextWake(w.schedule(now), now)
		t := time.NewTimer(wake.Sub(now))
		select {
		case <-t.C:
		case <-chld:
		case <-sigs:
		case <-ready:
		}
		t.Stop()
	}
}

// doneIfGone finishes when nothing of the command's tree is left (the
// package doc's invariant: reaped, childless, cgroup empty). fence releases
// the lease on the report.
func (w *watchdog) doneIfGone() (bool, error) {
	if w.exit == nil || !w.childless || !w.treeEmpty() {
		return false, nil
	}
	w.phase = w.phase.next(stepDone)
	err := w.finish()
	if w.fenceGone {
		w.endLeases()
	}
	return true, err
}

// act does what the phase asks at now: start the stop sequence when the
// stop time has come, stop what the command left when it ended on its own,
// send SIGKILL when its time has come, and again while anything is left.
func (w *watchdog) act(now clock.Boot) {
	if w.phase == phaseRunning {
		if stop, reason := stopStart(w.leaseStop, w.sp.Deadline); now >= stop && w.stillRunning() {
			w.beginStop(reason, now)
		} else if w.exit != nil {
			// The command ended on its own: stop what it left behind.
			w.phase = w.phase.next(stepEnded)
			w.leftovers = w.signalTree(syscall.Signal(w.sp.Signal))
			w.signalTree(syscall.SIGCONT)
			w.killAt = killTime(now, w.leaseStop, w.sp.Grace)
		}
	}
	if w.phase == phaseStopping && now >= w.killAt {
		w.phase = w.phase.next(stepKill)
		w.killAll()
	}
	if w.phase == phaseKilling {
		w.killAll() // again: catch what forked meanwhile
	}
}

// schedule is what the loop waits for at now. It counts the looks that
// have no event to wake them, which back off.
func (w *watchdog) schedule(now clock.Boot) schedule {
	s := schedule{phase: w.phase}
	switch w.phase {
	case phaseRunning:
		s.stop, _ = stopStart(w.leaseStop, w.sp.Deadline)
	case phaseStopping:
		s.killAt = w.killAt
		if w.exit != nil && w.leftovers == 0 {
			// The command ended and left nothing that was seen: its
			// cgroup empties a moment after the last exit, with no event
			// to wake us, so look again soon, backing off from 1ms.
			s.again = now.Add(time.Millisecond << min(w.emptyChecks, 6))
			w.emptyChecks++
		}
	case phaseKilling:
		// Sweep again soon, then less often: a process in uninterruptible
		// sleep may take long to die.
		s.again = now.Add(min(sweep<<min(w.sweeps, 5), recheck))
		w.sweeps++
	}
	return s
}

// stillRunning reports whether the command runs and no stop sequence was
// started (a stop order, or the end of fence, starts one now), after a
// fresh look for the command's exit, made just before a stop: a command
// that ended since the loop's last look (the watchdog frozen in between)
// is not reported stopped.
func (w *watchdog) stillRunning() bool {
	if w.phase == phaseRunning && w.exit == nil {
		w.reap()
	}
	return w.phase == phaseRunning && w.exit == nil
}

// waitStart waits for the start order (phase waiting) and takes its spec;
// the end of the orders before it means fence gave up (the lock was busy)
// or died: then the phase is done. It returns the orders that came after
// the start order in the same read, to be taken once the command runs.
func (w *watchdog) waitStart() []order {
	for {
		orders, ended := w.orders.take()
		for i, o := range orders {
			if o.Op == opStart && o.Spec != nil {
				w.sp = o.Spec
				return orders[i+1:]
			}
		}
		if ended {
			w.phase = w.phase.next(stepStop)
			return nil
		}
		<-w.orders.ready
	}
}

// takeOrders carries out every order waiting in the pipe, and starts the
// stop sequence when the pipe has ended (fence is gone). It reports whether
// the pipe has ended.
func (w *watchdog) takeOrders() bool {
	orders, ended := w.orders.take()
	for _, o := range orders {
		w.order(o)
	}
	if ended {
		w.fenceGone = true
	}
	if ended && w.stillRunning() {
		w.beginStop(reasonFenceGone, clock.Now())
	}
	return ended
}

func (w *watchdog) order(o order) {
	switch o.Op {
	case opExtend:
		if w.phase == phaseRunning && o.LeaseStop > w.leaseStop {
			w.leaseStop = o.LeaseStop
		}
	case opStop:
		if w.stillRunning() {
			r := cmp.Or(o.Reason, reasonLost)
			w.beginStop(r, clock.Now())
		}
	case opSignal:
		if w.exit == nil && o.Signal > 0 {
			_ = unix.Kill(-w.leader, syscall.Signal(o.Signal))
		}
	}
}

// start starts the command and reports it.
func (w *watchdog) start() error {
	sp := w.sp
	if sp.Cgroup && w.cgBase != "" {
		cg, err := newCgroup(w.cgBase, fmt.Sprintf("%s%d-%d", cgroupPrefix, w.self, clock.Now()))
		if err == nil {
			w.cg = cg
		}
	}
	attr := &syscall.ProcAttr{
		Env:   sp.Env,
		Files: []uintptr{0, 1, 2},
		Sys:   sysProcAttr(sp.Foreground, w.cg),
	}
	w.foreground = sp.Foreground
	at := clock.Now()
	pid, err := syscall.ForkExec(sp.Path, sp.Args, attr)
	if err != nil && w.cg != nil {
		// clone3 into a cgroup may be refused (old kernel, no permission):
		// retry without; an exec error repeats itself.
		_ = w.cg.remove()
		w.cg = nil
		attr.Sys = sysProcAttr(sp.Foreground, nil)
		pid, err = syscall.ForkExec(sp.Path, sp.Args, attr)
	}
	if err != nil {
		w.foreground = false
		code := 126
		if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ENOTDIR) {
			code = 127
		}
		return w.out.Encode(report{Ev: evExecError, Code: code, Msg: fmt.Sprintf("%s: %v", sp.Args[0], err), At: clock.Now()})
	}
	w.leader = pid
	if freezeBeforeReport != nil {
		freezeBeforeReport() // fence must stop the command alone
	}
	r := report{Ev: evStarted, PID: pid, PGID: pid, At: at}
	if w.cg != nil {
		r.Cgroup = w.cg.dir
	}
	// The command runs: a report that cannot be written (fence died since
	// its start order) must not end the watchdog, which would leave the
	// command to its parent-death signal (its other descendants to no one)
	// and the leases to their TTL. The watch loop finds the end of the
	// order pipe, stops the command and ends the leases.
	_ = w.out.Encode(r)
	return nil
}

// beginStop sends the stop signal to the command's tree and plans SIGKILL
// after the grace period, at the latest when the lease's safe-until comes.
func (w *watchdog) beginStop(reason string, now clock.Boot) {
	w.phase = w.phase.next(stepStop)
	w.stopping = reason
	sig := syscall.Signal(w.sp.Signal)
	w.killAt = killTime(now, w.leaseStop, w.sp.Grace)
	if sig == syscall.SIGKILL {
		w.killAt = now
	} else {
		w.signalTree(sig)
		// A stopped process (^Z, SIGTTIN) acts on the signal only once
		// continued.
		w.signalTree(syscall.SIGCONT)
	}
	_ = w.out.Encode(report{Ev: evStopping, Reason: reason, At: now})
}

// signalTree sends sig to the command's process group and to every other
// descendant of the watchdog (those that left the group), each process
// once. It returns how many processes outside the group it signalled
// (after the command ended, every descendant is outside it).
func (w *watchdog) signalTree(sig syscall.Signal) int {
	if w.exit == nil {
		_ = unix.Kill(-w.leader, sig)
	}
	n, _ := proc.SignalDescendants(w.self, sig, func(st proc.Stat) bool {
		return w.exit == nil && st.PGID == w.leader
	})
	return n
}

// killAll sends SIGKILL to everything left of the command's tree.
func (w *watchdog) killAll() {
	if w.cg != nil {
		w.cg.kill()
	}
	if w.exit == nil {
		_ = unix.Kill(-w.leader, syscall.SIGKILL)
	}
	_, _ = proc.SignalDescendants(w.self, syscall.SIGKILL, nil)
}

// reap collects every exited child (the command, and orphans handed to the
// watchdog as subreaper), recording the command's status.
func (w *watchdog) reap() {
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
		if err == unix.EINTR {
			continue
		}
		if pid <= 0 || err != nil {
			w.childless = errors.Is(err, unix.ECHILD)
			return
		}
		if pid != w.leader || w.exit != nil {
			continue
		}
		e := &exitInfo{Code: ws.ExitStatus(), Died: clock.Now(), Stopped: w.stopping, Killed: w.phase == phaseKilling}
		if ws.Signaled() {
			e.Code, e.Signal = -1, int(ws.Signal())
			if ws.Signal() == syscall.SIGKILL && w.stopping != "" {
				e.Killed = true
			}
		}
		w.exit = e
		if w.foreground {
			w.foreground = false
			restoreForeground(w.sp.FencePgrp, w.leader)
		}
	}
}

// treeEmpty reports whether no live process of the command's tree is left.
func (w *watchdog) treeEmpty() bool {
	if w.cg != nil {
		// No process leaves a cgroup on its own: the cgroup is the tree.
		return !w.cg.populated()
	}
	ds, err := proc.Descendants(w.self)
	if err != nil {
		return true // cannot see: the SIGKILLs were sent; do not hang
	}
	for _, d := range ds {
		if !d.Gone() {
			return false
		}
	}
	return true
}

// finish reports the command's end once nothing of its tree is left: fence
// releases the lease on this report, so the empty cgroup is removed after
// it (fence waits for the watchdog's exit before its own).
func (w *watchdog) finish() error {
	err := w.out.Encode(report{Ev: evExited, Exit: w.exit, At: clock.Now()})
	if w.cg != nil {
		_ = w.cg.remove()
	}
	return err
}

// endLeases ends the leases of the start order's Handover with end, within
// endTimeout (when: see doneIfGone). A failure leaves them to expire at
// their TTL, and says so on stderr (fence's, which the command shares),
// since the next holder then waits out the TTL.
func (w *watchdog) endLeases() {
	e := w.sp.End
	if w.end == nil || e == nil || len(e.Leases) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), endTimeout)
	defer cancel()
	if err := w.end(ctx, e.Coordinator, e.Leases); err != nil {
		names := make([]string, len(e.Leases))
		for i, l := range e.Leases {
			names[i] = l.Name
		}
		fmt.Fprintf(os.Stderr, "fence: fence died and its watchdog could not end the lease of %s: %v; it ends at its TTL\n",
			strings.Join(names, ", "), strings.ReplaceAll(err.Error(), "\n", "; "))
	}
}
