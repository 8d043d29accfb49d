// Package supervise runs a command as the holder of a lease: the heart of
// `fence run`.
//
// Three processes take part: fence (the caller of Run), a watchdog (the
// fence binary re-executed with WatchdogArg) and the command, which the
// watchdog starts in a process group of its own. fence acquires the lease,
// keeps it renewed (package fencing) and sends each new stop time to the
// watchdog: the lease's safe-until less the grace period, on the boot clock.
// The watchdog sends the stop signal to the command's group and every
// descendant when the stop time passes without extension, SIGKILL after the
// grace period, and does the same at once when the pipe from fence closes
// (fence died, even by SIGKILL). fence keeps the same deadline itself, so
// either process alone stops the command before its lease can expire: a
// frozen fence (SIGSTOP, a stall) is covered by the watchdog, a frozen
// watchdog by fence.
//
// When fence dies (even by SIGKILL), nobody would release the lease: the
// watchdog ends it itself (Options.Handover: fence hands it the
// coordinator's settings and the leases in the start order, and
// WatchdogMain's LeaseEnder releases them), so that the next holder does not
// wait out the TTL. Invariant: the watchdog ends a lease only once the
// command's main process is reaped, the watchdog has no child left (as
// subreaper, every orphan of the tree is its child: none is left anywhere
// in the tree, not even a zombie) and the command's cgroup, where there is
// one, is empty; and only when the pipe from fence ended, never when fence
// is merely frozen (fence may wake up and still holds the lease). Tested by
// cmd/fence's TestRunKilledHandsOverNeverEarlier.
//
// Descendants that leave the process group (setsid, double forks) are
// caught in two ways: the command runs in a cgroup v2 of its own where the
// machine allows it (root, or a delegated subtree; cgroup2 mounted, also at
// /sys/fs/cgroup/unified on hybrid v1 systems), which cgroup.kill empties at
// once; and the watchdog is a child subreaper, so orphans are re-parented
// to it and found by walking /proc. A descendant is missed only if the
// watchdog itself is killed (SIGKILL of both fence and the watchdog by PID):
// then the command's main process still dies (parent-death signal), but its
// other descendants are orphaned to init (in a cgroup too: nothing kills
// it). The watchdog runs in a process group of its own, in fence's session,
// so that a signal to fence's whole group (timeout -s KILL, a supervisor's
// group kill, kill -STOP of a shell's job) does not reach it: it then stops
// the command as when fence alone dies or freezes. Outside Linux there is no
// parent-death signal, cgroup or subreaper: the watchdog stops the command's
// group only, and nothing stops it if the watchdog dies.
//
// Timing. fence renews every TTL/3; the lease is safe until the send time
// of the last acknowledged renewal + TTL - margin; the stop signal goes at
// safe-until - grace and SIGKILL at safe-until. Defaults: grace
// DefaultGrace(TTL) = min(TTL/5, 5s); margin fencing.DefaultMargin(TTL) =
// TTL/10 within [100ms, 2s] (at most TTL/5). Run refuses settings that do
// not leave room for two renewal attempts before the stop signal
// (2*TTL/3 < TTL - margin - grace). With the default TTL of 15s: grace 3s,
// margin 1.5s, so the stop signal comes 10.5s after the send of the last
// acknowledged renewal, SIGKILL at 13.5s, and the lease cannot expire
// before 15s.
//
// Revocation. Once the command has started, fence also watches its lease
// when the coordinator can tell at once that it ended, or that `fence
// revoke` asks the holder to stop (Coordinator.WatchLease: etcd watches the
// lease's key; the local backend the lock's lock file, which a revoke
// writes to). A notice that the lease ended stops the command as a renewal
// that found the lease lost does (exit 76, the same message and history
// event); a stop request runs the same stop sequence while the lease is
// still held, and once nothing of the command's tree is left fence releases
// the lease, as the revoker waits for, and exits 76 saying it was revoked. A
// watch that fails only leaves the renewals to find out. The watch ends
// before fence's own release.
//
// Terminal. When stdin is a terminal and fence is in its foreground, the
// command's group gets the terminal's foreground (it can read it, and ^C,
// ^\ reach it directly, as without fence); the watchdog, from its own
// background group with SIGTTOU blocked, gives it back to fence's group when
// the command ends, unless someone else (the shell of a job that was
// stopped) took it meanwhile.
//
// Across a system suspend, all processes stop and resume together; the
// watchdog reads the boot clock at least every 100ms, so the command runs
// at most about that long after a resume past its stop time.
package supervise

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/mattn/go-isatty"
	"golang.org/x/sys/unix"

	"github.com/fence-dev/fence/internal/exitcode"
	"github.com/fence-dev/fence/internal/logging"
	"github.com/fence-dev/fence/internal/proc"
	"github.com/fence-dev/fence/pkg/clock"
	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/fencing"
)

// forwarded are the signals fence passes on to the command's group.
var forwarded = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT}

// notifyForwarded relays to sigs the forwarded signals that are not
// ignored, and returns those that are.
func notifyForwarded(sigs chan<- os.Signal) (ignored []int) {
	for _, s := range forwarded {
		if signal.Ignored(s) {
			ignored = append(ignored, int(s.(syscall.Signal)))
			continue
		}
		signal.Notify(sigs, s)
	}
	return ignored
}

// Start checks opts and starts the watchdog process. The error (exit code
// exitcode.Failure) wraps coord.ErrInvalid when opts are invalid; no
// watchdog is left running after an error.
func Start(opts Options) (*Runner, error) {
	p, err := check(opts)
	if err != nil {
		return nil, err
	}
	if p.MetricsFile != "" {
		// Checked here, not in run: there is no file to write the metrics of
		// this failure to.
		if st, err := os.Stat(filepath.Dir(p.MetricsFile)); err != nil || !st.IsDir() {
			return nil, fmt.Errorf("%w: --metrics-file %s: its directory does not exist", coord.ErrInvalid, p.MetricsFile)
		}
	}
	r := &Runner{p: p, m: metrics{lock: p.Lock, once: p.Once != ""}, renewed: make(chan struct{}, 1)}
	r.setStreams()
	// Caught before anything else: a signal never finds the lock acquired
	// with no handler in place.
	r.sigs = make(chan os.Signal, 4)
	r.ignored = notifyForwarded(r.sigs)
	if err := r.startWatchdog(); err != nil {
		signal.Stop(r.sigs)
		return nil, err
	}
	return r, nil
}

// Run acquires the lock on c, runs the command under a watchdog as the lease's
// holder, releases the lock once no process of the command's tree is left,
// and returns fence's exit code: the command's own code; 128+N when it died
// of signal N that fence did not send for a stop (a forwarded signal counts
// as the command's); or one of package exitcode's: Busy (as
// Options.ConflictExitCode), LeaseLost, Deadline, Failure, CannotExec,
// NotFound.
//
// err is non-nil when fence has something to say: one line for stderr (why
// the command did not run, or why it was stopped), to be printed by the
// caller; it wraps coord.ErrBusy, coord.ErrInvalid, ... as the cause
// requires, but the code returned is the one to exit with. Run itself
// writes to Stderr only with Verbose, the "waiting for" line when Stderr is
// a terminal, and a warning when the lease could not be released or the
// metrics file not written.
//
// When ctx ends, the command is stopped as at a deadline and Run returns
// exitcode.Failure; the lease is released after. While it runs, SIGINT,
// SIGTERM, SIGHUP and SIGQUIT sent to the calling process are forwarded to
// the command's process group (those that were ignored when Run started stay
// ignored, for fence and the command); while it waits for the lock, they end
// the wait (exit 128+N).
//
// It may be called once, and not after Close.
func (r *Runner) Run(ctx context.Context, c coord.Coordinator) (int, error) {
	if !r.used.CompareAndSwap(false, true) {
		return exitcode.Failure, errors.New("supervise: Runner.Run called after Run or Close")
	}
	defer r.closeWatchdog()
	r.c = c
	code, err := r.run(ctx)
	r.m.exitCode = code
	if r.p.MetricsFile != "" {
		if werr := writeMetrics(r.p.MetricsFile, &r.m); werr != nil {
			r.warnf("%v", werr)
		}
	}
	return code, err
}

// Close kills the watchdog, which was never given a command, and waits for
// it to exit. Once Run was called it does nothing: Run ends the watchdog
// itself.
func (r *Runner) Close() {
	if r.used.CompareAndSwap(false, true) {
		signal.Stop(r.sigs)
		r.closeWatchdog()
	}
}

// Runner is a `fence run` whose watchdog process is already starting. The
// watchdog is the fence binary started again, and its start-up (the
// package initialisation of a large Go program) takes about as long as
// connecting to etcd and acquiring a lock: Start it before opening the
// coordinator, and the two overlap.
//
// A Runner must be closed or run, or its watchdog lives on until the calling
// process exits.
type Runner struct {
	used atomic.Bool // Run or Close was called
	p    *plan

	// The signals fence forwards, and those found ignored at the start.
	sigs    chan os.Signal
	ignored []int

	c      coord.Coordinator
	stderr io.Writer
	log    *slog.Logger // fence's own lines, on stderr
	m      metrics

	// hs is the leases the command runs under; renewed wakes the loop
	// when one was renewed (its HeldSet's, for Options.Holds).
	hs      *HeldSet
	renewed chan struct{}
	// hist records renewal failures as they are found to be over (see
	// failuresBack).
	hist failureRecorder

	wd     *exec.Cmd
	orders *orderQueue
	// reports are the watchdog's, closed once it has exited and was waited
	// for (reports: nil once read to its end).
	reports, reportsCh <-chan report
	// phase of the supervision: running from the start order on (the
	// watchdog may have a command).
	phase phase

	started   *report // the watchdog's started report
	wdStopped string  // the reason the watchdog reported
	// end is what the watchdog reported and fence found, for outcome.
	end       ending
	attaching sync.WaitGroup
	stopWatch func() // ends the coordinator's watch of the leases (watchLease)

	// The supervision loop's state besides the phase: when the stop
	// sequence must start unless extended (the watchdog was told), the
	// deadline (0: none), fence's own stop once stopping, and the channels
	// the loop waits for besides r.sigs (nil once received).
	leaseStop, deadline clock.Boot
	own                 ownStop
	heldDone, ctxDone   <-chan struct{}
}

// setStreams settles where fence's own lines go (r.stderr): the command's
// stderr, serialized when it is not a file.
func (r *Runner) setStreams() {
	p := r.p
	switch p.Stderr.(type) {
	case nil:
		r.stderr = os.Stderr
	case *os.File:
		r.stderr = p.Stderr
	default:
		// The command's stderr is copied into it from a pipe, concurrently
		// with fence's own lines.
		r.stderr = &lockedWriter{w: p.Stderr}
		p.Stderr = r.stderr
	}
	// Options.LogFormat's style, checked by the caller; an unknown format
	// is text.
	var err error
	if r.log, err = logging.New(r.stderr, p.LogFormat, "debug"); err != nil {
		r.log, _ = logging.New(r.stderr, "text", "debug")
	}
}

func (r *Runner) run(ctx context.Context) (int, error) {
	p := r.p
	env := p.Env
	if env == nil {
		env = os.Environ()
	}
	env = scrubEnv(env, p.Location)

	path, args, err := resolve(p, env)
	if err != nil {
		return execCode(err), err
	}

	// Signals: forwarded to the command once it runs; before, they end the
	// wait for the lock.
	defer signal.Stop(r.sigs)

	if p.Holds != nil {
		r.hs, r.renewed = p.Holds, p.Holds.renewed
		r.verbosef("running under %d leases of %q, safe until the earliest", len(p.Holds.helds), p.Lock)
		return r.supervise(ctx, path, args, env)
	}
	release, code, err := r.acquire(ctx)
	if release == nil {
		return code, err
	}
	r.m.token = r.hs.helds[0].Token()

	code, runErr := r.supervise(ctx, path, args, env)
	r.attaching.Wait()

	rctx, cancel := r.afterRun(ctx, code)
	defer cancel()
	code, runErr = r.onceComplete(rctx, code, runErr) // --once: before the release
	for _, h := range r.hs.helds {
		st := h.Stats()
		r.m.renewals += st.Renewals
		r.m.failures += st.Failures
	}
	r.record(rctx, code)
	switch err := release(rctx); {
	case err != nil:
		r.warnf("%v", err)
	case len(p.Locks) > 0:
		r.verbosef("released %s (in reverse order)", p.Lock)
	default:
		r.verbosef("released %q (token %d)", p.Lock, r.m.token)
	}
	return code, runErr
}

// acquireOptions are the acquisition's options; the watchdog's PID is
// recorded with the lease.
func (r *Runner) acquireOptions() coord.AcquireOptions {
	p := r.p
	holder := cmp.Or(p.Holder, coord.DefaultHolder())
	return coord.AcquireOptions{
		TTL:    p.TTL,
		Holder: holder,
		Wait:   p.Wait,
		Slots:  p.Slots,
		Process: &coord.ProcessInfo{
			PIDs: []int{os.Getpid(), r.wd.Process.Pid},
		},
		OnWait: r.announceWait,
	}
}

// announceWait says whom the run waits for (--verbose, or on a terminal).
func (r *Runner) announceWait(cur coord.LockInfo) {
	p := r.p
	if !p.Verbose && (p.Quiet || !isTerminal(r.stderr)) {
		return
	}
	name := cmp.Or(cur.Name, p.Lock) // of a set: the lock waited for
	if cur.Slots > 1 {
		r.infof("waiting for %q, %d of its %d slots held (the oldest by %s, token %d)", name, len(cur.Holders), cur.Slots, cur.Holder, cur.Token)
	} else {
		r.infof("waiting for %q, held by %s (token %d)", name, cur.Holder, cur.Token)
	}
}

// acquire takes the run's own leases, a signal ending the wait: the lock
// (holdLock) or the set of Options.Locks (holdSet), and holds them (r.hs).
// Without a lease (release nil) the run ends with code and err: --once done
// already, the lock busy, the wait interrupted, or an error.
func (r *Runner) acquire(ctx context.Context) (release func(context.Context) error, code int, err error) {
	p := r.p
	if ok, code, err := r.oncePending(ctx); !ok {
		return nil, code, err // --once: done already (or the record cannot be read)
	}
	take := r.holdLock
	if len(p.Locks) > 0 {
		take = r.holdSet // set.go
	}
	var hs *HeldSet
	cause := r.interruptible(ctx, func(actx context.Context) error {
		hs, release, err = take(actx)
		return err
	})
	if err == nil && cause != nil {
		// A signal came as the lock (of a set: the last) was granted: do
		// not start the command.
		releaseBounded(ctx, release)
		err = cause
		if len(p.Locks) > 0 {
			err = &fencing.SetError{Lock: p.Locks[len(p.Locks)-1], Err: cause}
		}
	}
	if err != nil {
		code, err := acquireFailure(ctx, cause, p, err)
		return nil, code, err
	}
	if ok, code, err := r.oncePending(ctx); !ok {
		// --once: done by the holder before us.
		releaseBounded(ctx, release)
		return nil, code, err
	}
	r.hs = hs
	waited := r.m.wait.Round(time.Millisecond)
	if len(p.Locks) == 0 {
		l := hs.helds[0].Lease()
		r.verbosef("acquired %q: token %d, lease %s, TTL %v, waited %v", l.Name, l.Token, l.ID, l.TTL, waited)
		return release, 0, nil
	}
	for _, l := range hs.Leases() {
		r.verbosef("acquired %q: token %d, lease %s, TTL %v", l.Name, l.Token, l.ID, l.TTL)
	}
	r.verbosef("waited %v for %d locks", waited, len(hs.helds))
	return release, 0, nil
}

// holdLock acquires the lock and holds its lease. The hold outlives ctx
// (see interruptible).
func (r *Runner) holdLock(ctx context.Context) (*HeldSet, func(context.Context) error, error) {
	lease, err := r.c.Acquire(ctx, r.p.Lock, r.acquireOptions())
	if err != nil {
		return nil, nil, err
	}
	held, err := fencing.Hold(ctx, r.c, lease, r.holdOptions()...)
	if err != nil {
		releaseBounded(ctx, func(rctx context.Context) error { return r.c.Release(rctx, lease.Name, lease.ID) })
		return nil, nil, err
	}
	return NewHeldSet([]*fencing.Held{held}, leaseEnv(*lease)), held.Release, nil
}

// interruptible runs acquire with a context that a signal or the end of
// ctx ends until acquire returns, measures the wait (r.m.wait), and returns
// why that context ended: nil when it did not, an interrupted for a signal.
// A signal that comes as the lock is granted counts: the command must not
// start. The context is not ended after: the holds that fencing.AcquireSet
// takes with it outlive ctx (the command is stopped first, the leases
// released after).
func (r *Runner) interruptible(ctx context.Context, acquire func(context.Context) error) error {
	actx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		select {
		case s := <-r.sigs:
			cancel(interrupted{s.(syscall.Signal)})
		case <-ctx.Done():
			cancel(context.Cause(ctx))
		case <-done:
		}
	}()
	t0 := clock.Now()
	_ = acquire(actx)
	close(done)
	r.m.wait = clock.Now().Sub(t0)
	return context.Cause(actx)
}

// releaseBounded calls release with five seconds, whatever became of ctx.
func releaseBounded(ctx context.Context, release func(context.Context) error) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_ = release(rctx)
}

// acquireFailure is the exit code and error of an acquisition that failed
// with err (cause: why the acquisition's context ended, a signal or ctx's
// end), naming the lock (of a set: the one not taken).
func acquireFailure(ctx context.Context, cause error, p *plan, err error) (int, error) {
	lock := p.Lock
	var se *fencing.SetError
	if errors.As(err, &se) {
		lock = se.Lock
	}
	var intr interrupted
	switch {
	case errors.As(cause, &intr):
		return interruptedWhile(intr.sig, fmt.Sprintf("waiting for %q", lock))
	case errors.Is(err, coord.ErrBusy):
		return p.ConflictExitCode, err
	case ctx.Err() != nil:
		return exitcode.Failure, fmt.Errorf("waiting for %q: %w", lock, context.Cause(ctx))
	case errors.Is(err, coord.ErrLeaseLost):
		return exitcode.LeaseLost, err
	default:
		return exitcode.Failure, err
	}
}

// AfterStop bounds what Run does with the coordinator once the command was
// stopped (lease lost or unsafe, deadline, cancelled): the history records
// and the release. A caller that closes the coordinator after Run should
// bound its close as tightly (history.Recorder.CloseContext), so that fence
// exits within about a second of stopping its command even when the
// coordinator does not answer.
const AfterStop = 750 * time.Millisecond

type interrupted struct{ sig syscall.Signal }

func (i interrupted) Error() string { return "interrupted by SIG" + SignalName(i.sig) }

// interruptedWhile is fence's end for signal sig that came while it was
// doing what (no command ran, or it was being stopped): 128+N.
func interruptedWhile(sig syscall.Signal, what string) (int, error) {
	return 128 + int(sig), fmt.Errorf("interrupted by SIG%s while %s", SignalName(sig), what)
}

// startWatchdog starts the watchdog with its two pipes: fence itself again,
// /proc/self/exe (the running binary, even if replaced on disk since),
// whose main must dispatch WatchdogArg to WatchdogMain.
func (r *Runner) startWatchdog() error {
	p := r.p
	ordR, ordW, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("start watchdog: %w", err)
	}
	repR, repW, err := os.Pipe()
	if err != nil {
		ordR.Close()
		ordW.Close()
		return fmt.Errorf("start watchdog: %w", err)
	}
	const exe = "/proc/self/exe"
	cmd := exec.Command(exe, WatchdogArg)
	if len(os.Args) > 0 && os.Args[0] != "" {
		// The running binary under the name it was started as (ps shows
		// "fence __watchdog"), so that a binary that dispatches on argv[0]
		// (a multi-call binary, testscript's commands) runs as fence again.
		cmd.Args[0] = os.Args[0]
	}
	cmd.Stdin = cmp.Or[io.Reader](p.Stdin, os.Stdin)
	cmd.Stdout = cmp.Or[io.Writer](p.Stdout, os.Stdout)
	cmd.Stderr = cmp.Or[io.Writer](p.Stderr, os.Stderr)
	cmd.ExtraFiles = []*os.File{ordR, repW}
	// A process group of its own, in fence's session (see the package doc).
	cmd.SysProcAttr = watchdogProcAttr()
	cmd.WaitDelay = time.Second
	err = cmd.Start()
	ordR.Close()
	repW.Close()
	if err != nil {
		ordW.Close()
		repR.Close()
		return fmt.Errorf("start watchdog %s: %w", exe, err)
	}
	r.wd = cmd
	r.orders = newOrderQueue(ordW)
	reports := make(chan report, 16)
	go func() {
		defer close(reports)
		// Up to the end of the pipe, at the watchdog's end (or the first
		// malformed line); then the watchdog is waited for.
		dec := json.NewDecoder(repR)
		for {
			var rep report
			if dec.Decode(&rep) != nil {
				break
			}
			reports <- rep
		}
		repR.Close()
		_ = cmd.Wait()
	}()
	r.reports, r.reportsCh = reports, reports
	return nil
}

// closeWatchdog ends the order pipe (the watchdog exits when it has no
// command, or stops it) and waits for the watchdog to exit and its reports
// to end. A watchdog that was never given a command has nothing to stop or
// clean up: it is killed, so that a failure before the command does not
// wait for its start-up.
func (r *Runner) closeWatchdog() {
	if r.phase == phaseWaiting {
		_ = r.wd.Process.Kill()
	}
	r.orders.close()
	for range r.reportsCh {
	}
}

// supervise starts the command and follows it until the watchdog is done.
func (r *Runner) supervise(ctx context.Context, path string, args, env []string) (int, error) {
	p := r.p
	r.leaseStop = leaseStopOf(r.hs.SafeUntil(), p.grace)
	if p.Deadline > 0 {
		r.deadline = clock.Now().Add(p.Deadline)
	}
	if p.NoRenew && (r.deadline == 0 || r.deadline > r.leaseStop) {
		r.deadline = r.leaseStop // what the lease covers
	}
	env = setEnv(env, r.commandEnv(r.deadline))
	sp := &spec{
		Path: path, Args: args, Env: env,
		Signal: int(p.signal), Grace: p.grace,
		LeaseStop: r.leaseStop, Deadline: r.deadline,
		Ignore:     r.ignored,
		Foreground: foreground(r.wd.Stdin),
		FencePgrp:  unix.Getpgrp(),
		Cgroup:     !p.NoCgroup,
		End:        r.endSpec(),
	}
	if p.OnAcquired != nil {
		p.OnAcquired(r.stderr)
	}
	r.orders.push(order{Op: opStart, Spec: sp})
	r.phase = r.phase.next(stepStart)

	defer func() {
		if r.stopWatch != nil {
			r.stopWatch()
		}
	}()
	r.heldDone, r.ctxDone = r.hs.Context().Done(), ctx.Done()
	for {
		now := clock.Now()
		r.act(now)
		// The watchdog's last word (report): the command could not be
		// started, or it ended and nothing of its tree is left. The lease
		// can go now; the watchdog exits meanwhile (it is waited for after
		// the release). Without a last word, the loop ends with the
		// watchdog.
		if r.reports == nil {
			r.phase = r.phase.next(stepDone)
		}
		if r.phase == phaseDone {
			break
		}
		r.await(ctx, now, nextWake(r.schedule(), now))
	}
	return r.outcome()
}

// endSpec is what the watchdog needs to end the leases itself when fence
// is gone (Options.Handover): the coordinator's settings and the leases, the
// command's in the reverse order of their acquisition (as a set is
// released), then Handover.Also. nil without a Handover or settings.
func (r *Runner) endSpec() *endSpec {
	h := r.p.Handover
	if h == nil || h.Coordinator == nil {
		return nil
	}
	settings, err := h.Coordinator()
	if err != nil || len(settings) == 0 {
		r.verbosef("the watchdog cannot end the lease if fence dies: %v", err)
		return nil
	}
	leases := r.hs.Leases()
	slices.Reverse(leases)
	return &endSpec{Coordinator: settings, Leases: append(leases, h.Also...)}
}

// act does what the phase asks at now: tell the watchdog of a later stop
// time (every renewal moves the leases' earliest safe-until), start the
// stop sequence when the stop time has come (the lease's or the
// deadline), and send fence's own stop signal and SIGKILL when theirs has.
func (r *Runner) act(now clock.Boot) {
	p := r.p
	if r.phase == phaseRunning {
		if ls := leaseStopOf(r.hs.SafeUntil(), p.grace); ls > r.leaseStop {
			r.leaseStop = ls
			r.orders.push(order{Op: opExtend, LeaseStop: ls})
		}
		if stop, reason := stopStart(r.leaseStop, r.deadline); now >= stop {
			r.startStop(reason, now)
		}
	}
	// fence's own stop (ownStop) does not wait for the watchdog's report
	// of the command's group: signalAll reaches the command through the
	// watchdog's descendants.
	if r.phase.stopping() {
		signal, kill := r.own.due(now, r.wdStopped != "")
		if signal {
			r.signalAll(p.signal)
		}
		if kill {
			r.phase = r.phase.next(stepKill)
			r.signalAll(syscall.SIGKILL)
		}
	}
}

// startStop starts the stop sequence for reason at now, unless it runs
// already or the command is done: the watchdog is told to stop the
// command, and fence's own stop backs it.
func (r *Runner) startStop(reason string, now clock.Boot) {
	if r.phase != phaseRunning {
		return
	}
	r.phase = r.phase.next(stepStop)
	r.end.stopping = reason
	r.orders.push(order{Op: opStop, Reason: reason})
	r.own = beginOwnStop(now, r.leaseStop, r.p.grace, r.p.signal)
	r.verbosef("stopping the command (%s)", reason)
}

// schedule is what fence's loop waits for in its phase.
func (r *Runner) schedule() schedule {
	if r.phase == phaseRunning {
		stop, _ := stopStart(r.leaseStop, r.deadline)
		return schedule{phase: r.phase, stop: stop}
	}
	return r.own.schedule(r.phase)
}

// await sleeps from now until wake, a renewal, a report of the watchdog
// (or their end), the end of the hold (a lease lost, or the lease watch's
// notice), the end of ctx or a signal to forward, and takes it in.
func (r *Runner) await(ctx context.Context, now, wake clock.Boot) {
	t := time.NewTimer(wake.Sub(now))
	defer t.Stop()
	select {
	case <-t.C:
	case <-r.renewed: // act tells the watchdog
	case rep, ok := <-r.reports:
		if !ok {
			r.reports = nil
			break
		}
		r.report(ctx, rep)
	case <-r.heldDone:
		r.heldDone = nil
		// A lease lost, or the watch's notice that one ended or that its
		// holder is asked to stop (not HeldSet.Close).
		if cause := context.Cause(r.hs.Context()); cause != context.Canceled {
			r.end.lostErr = cmp.Or(r.end.lostErr, cause)
			r.startStop(reasonLost, clock.Now())
		}
	case <-r.ctxDone:
		r.ctxDone = nil
		r.end.cancelErr = context.Cause(ctx)
		r.startStop(reasonCanceled, clock.Now())
	case s := <-r.sigs:
		r.verbosef("forwarding SIG%s to the command", SignalName(s.(syscall.Signal)))
		r.orders.push(order{Op: opSignal, Signal: int(s.(syscall.Signal))})
	}
}

// report takes in one report of the watchdog.
func (r *Runner) report(ctx context.Context, rep report) {
	switch rep.Ev {
	case evStarted:
		r.started = &rep
		r.verbosef("started the command: pid %d, process group %d%s", rep.PID, rep.PGID, cgroupNote(rep.Cgroup))
		r.watchLease(ctx)
		pi := coord.ProcessInfo{PIDs: []int{os.Getpid(), r.wd.Process.Pid}, PGID: rep.PGID}
		for _, lease := range r.hs.Leases() {
			r.attaching.Go(func() {
				actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
				defer cancel()
				if err := r.c.AttachProcess(actx, lease.Name, lease.ID, pi); err != nil {
					r.verbosef("could not record the command's process group with the lease: %v", err)
				}
			})
		}
	case evExecError:
		r.end.execErr = &rep
		r.phase = r.phase.next(stepDone)
	case evStopping:
		r.wdStopped = rep.Reason
	case evExited:
		r.end.exit = rep.Exit
		r.phase = r.phase.next(stepDone)
	case evError:
		r.end.wdErr = rep.Msg
	}
}

// signalAll is fence's own stop: the command's group, its cgroup and the
// watchdog's descendants.
func (r *Runner) signalAll(sig syscall.Signal) {
	if r.started != nil {
		_ = unix.Kill(-r.started.PGID, sig)
		if r.started.Cgroup != "" {
			cg := &cgroup{dir: r.started.Cgroup, fd: -1}
			if sig == syscall.SIGKILL {
				cg.kill()
			} else {
				cg.signal(sig)
			}
		}
	}
	// The command and everything it started are the watchdog's descendants
	// (it is their subreaper), reported or not.
	_, _ = proc.SignalDescendants(r.wd.Process.Pid, sig, nil)
}

// outcome maps how things ended to fence's exit code and message
// (outcomeOf), after what it must do first: when the watchdog died without
// a last word, make sure nothing of the command is left; when the command
// ended, see whether the lease was lost meanwhile.
func (r *Runner) outcome() (int, error) {
	e := &r.end
	switch {
	case e.execErr != nil:
	case e.exit == nil:
		// The watchdog died without a last word: make sure nothing is left.
		r.signalAll(syscall.SIGKILL)
		if r.started != nil && r.started.Cgroup != "" {
			_ = removeCgroupDir(r.started.Cgroup)
		}
		e.wdState = fmt.Sprint(r.wd.ProcessState) // the loop ended once it had exited
	default:
		if e.lostErr == nil {
			// fence may have been resumed a moment ago: see for itself.
			if err := r.hs.Check(); errors.Is(err, coord.ErrLeaseLost) {
				e.lostErr = err
			}
		}
		if r.started != nil {
			r.m.duration = e.exit.Died.Sub(r.started.At)
		}
	}
	e.safeUntil, e.token = r.hs.SafeUntil(), r.m.token
	if r.p.Holds == nil {
		// The lease not renewed in time when no loss was reported (of a
		// set: the one that would expire first).
		l := r.hs.earliest().Lease()
		e.unrenewed, e.token = l.Name, l.Token
	}
	res := outcomeOf(r.p, *e)
	r.m.lost = r.m.lost || res.lost
	r.m.deadlineExceeded = r.m.deadlineExceeded || res.deadline
	if res.verbose != "" {
		r.verbosef("%s", res.verbose)
	}
	return res.code, res.err
}

func deadlineText(p *plan) string {
	if p.Deadline > 0 {
		return p.Deadline.String()
	}
	return "of the --no-renew lease"
}

// endText is how a command that fence did not stop ended.
func endText(e *exitInfo) string {
	if e.Signal != 0 {
		return "was killed by SIG" + SignalName(syscall.Signal(e.Signal))
	}
	return fmt.Sprintf("exited with code %d", e.Code)
}

func stopText(p *plan, e *exitInfo) string {
	s := "SIG" + SignalName(p.signal)
	if e.Killed && p.signal != syscall.SIGKILL {
		s += fmt.Sprintf(", then SIGKILL after %v", p.grace)
	}
	return s
}

func cgroupNote(cg string) string {
	if cg == "" {
		return ""
	}
	return ", cgroup " + cg
}

func (r *Runner) verbosef(format string, args ...any) {
	if r.p.Verbose {
		r.infof(format, args...)
	}
}

// infof and warnf print one line of fence's own, in --log-format's style.
func (r *Runner) infof(format string, args ...any) { r.log.Info(fmt.Sprintf(format, args...)) }

func (r *Runner) warnf(format string, args ...any) { r.log.Warn(fmt.Sprintf(format, args...)) }

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && isatty.IsTerminal(f.Fd())
}

// orderQueue writes orders to the watchdog from its own goroutine, so that a
// frozen watchdog (a full pipe) never blocks fence. Of the extensions not
// yet written only the latest is kept.
type orderQueue struct {
	mu      sync.Mutex
	pending []order
	closed  bool
	wake    chan struct{}
	done    chan struct{}
	w       *json.Encoder
	f       *os.File
}

func newOrderQueue(f *os.File) *orderQueue {
	q := &orderQueue{wake: make(chan struct{}, 1), done: make(chan struct{}), w: json.NewEncoder(f), f: f}
	go q.loop()
	return q
}

func (q *orderQueue) push(o order) {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return
	}
	if o.Op == opExtend && len(q.pending) > 0 && q.pending[len(q.pending)-1].Op == opExtend {
		q.pending[len(q.pending)-1] = o
	} else {
		q.pending = append(q.pending, o)
	}
	q.mu.Unlock()
	poke(q.wake)
}

// close writes what is pending, then closes the pipe.
func (q *orderQueue) close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	poke(q.wake)
	<-q.done
}

func (q *orderQueue) loop() {
	defer close(q.done)
	defer q.f.Close()
	// Every push and close pokes after its change: what they left is
	// taken at the next wake.
	for range q.wake {
		q.mu.Lock()
		batch, closed := q.pending, q.closed
		q.pending = nil
		q.mu.Unlock()
		for _, o := range batch {
			if q.w.Encode(o) != nil {
				break // the watchdog is gone; drop orders until closed
			}
		}
		if closed {
			return
		}
	}
}

// resolve finds the program to run: /bin/sh for --shell, else the command
// looked up in the command's PATH like a shell does. The errors wrap
// errNotFound (127) or errNoExec (126).
func resolve(p *plan, env []string) (string, []string, error) {
	if p.Shell {
		return "/bin/sh", []string{"sh", "-c", p.Command[0]}, nil
	}
	name := p.Command[0]
	args := append([]string(nil), p.Command...)
	if strings.Contains(name, "/") {
		if err := executable(name); err != nil {
			return "", nil, fmt.Errorf("%s: %w", name, err)
		}
		return name, args, nil
	}
	pathVar := "/usr/local/bin:/usr/bin:/bin"
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			pathVar = v
		}
	}
	var denied error
	for _, dir := range filepath.SplitList(pathVar) {
		full := filepath.Join(cmp.Or(dir, "."), name)
		if abs, err := filepath.Abs(full); err == nil {
			full = abs // an empty or relative entry: fence's directory
		}
		switch err := executable(full); {
		case err == nil:
			return full, args, nil
		case errors.Is(err, errNoExec) && denied == nil:
			denied = fmt.Errorf("%s: %w", full, err)
		}
	}
	if denied != nil {
		return "", nil, denied
	}
	return "", nil, fmt.Errorf("%s: %w", name, errNotFound)
}

var (
	errNotFound = errors.New("command not found")
	errNoExec   = errors.New("permission denied (not an executable file)")
)

func executable(path string) error {
	st, err := os.Stat(path)
	switch {
	case errors.Is(err, os.ErrNotExist), errors.Is(err, syscall.ENOTDIR):
		return errNotFound
	case err != nil:
		return fmt.Errorf("%w: %v", errNoExec, err)
	case st.IsDir() || st.Mode()&0o111 == 0:
		return errNoExec
	}
	if unix.Access(path, unix.X_OK) != nil {
		return errNoExec
	}
	return nil
}

func execCode(err error) int {
	if errors.Is(err, errNotFound) {
		return exitcode.NotFound
	}
	return exitcode.CannotExec
}

// lockedWriter serializes writes to w.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

// afterRun bounds what fence does with the coordinator once its command has
// ended (history records, the --once record, the release): AfterStop after
// a stop of the command or a lease lost, when the coordinator may well not
// answer (that may be why the lease was lost).
func (r *Runner) afterRun(ctx context.Context, code int) (context.Context, context.CancelFunc) {
	budget := 10 * time.Second
	if r.end.stopping != "" || r.wdStopped != "" || r.end.lostErr != nil || code == exitcode.LeaseLost || code == exitcode.Deadline {
		budget = AfterStop
	}
	return context.WithTimeout(context.WithoutCancel(ctx), budget)
}
