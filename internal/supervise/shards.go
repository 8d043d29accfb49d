package supervise

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/fence-dev/fence/internal/exitcode"
	"github.com/fence-dev/fence/internal/logging"
	"github.com/fence-dev/fence/internal/output"
	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/fencing"
	"github.com/fence-dev/fence/pkg/shards"
)

// ShardRunner is `fence shards run`: it runs the command under the shards
// a group member holds, each (re)start under a HeldSet of their leases,
// and restarts it (stop signal, grace) whenever the member's set changes.
// Give OnRenewal to the member's holds (fencing.OnRenewal).
type ShardRunner struct {
	cur atomic.Pointer[HeldSet]
	// OnRestart, when set, is called before each restart with the count,
	// the new set and why.
	OnRestart func(n int, set []int, reason string)
}

// OnRenewal is told of each renewal of a shard's lease (a
// fencing.OnRenewal function).
func (sr *ShardRunner) OnRenewal(_ *fencing.Held, err error) {
	if s := sr.cur.Load(); s != nil && err == nil {
		s.Renewed()
	}
}

var errSetChanged = errors.New("the member's shards changed")

// Run runs opts' command under m's shards until it exits on its own (its
// exit code), a signal ends fence, or m leaves the group (76). settle is
// how long the set must stay unchanged before the command is (re)started
// with it when it is not yet all the map gives the member. Losing a shard's
// lease stops the command before that lease can expire (as fence run); the
// command is then started again with the shards left and those taken back.
//
// Each start goes through three steps: waiting for a set to run the
// command with (waitForSet), running it under that set's HeldSet while a
// watcher decides whether the member's set changed enough to restart
// (runWith, watchSet), and deciding on its end: restart or return
// (shardAfter). The first two decide with shardSet.look on one view of the
// member's live set (w).
//
// Goroutines: Run's own, and during each run the Runner's and the
// watcher's. The watcher is the only reader of the signals (until the
// Runner returned, also while the command is stopped for a restart: a
// signal then ends fence instead) and of m.Changed while the command runs,
// Run's loop the only one while it waits; Run waits for the watcher to end
// before it reads what it saw. A signal between the last look of the
// waiting step and the Runner's own signal.Notify (the Runner's start, a
// few milliseconds) reaches only the watcher: the command does not get it,
// and fence ends when the command does.
func (sr *ShardRunner) Run(ctx context.Context, c coord.Coordinator, m *shards.Member, opts Options, settle time.Duration) (int, error) {
	sigs := make(chan os.Signal, 4)
	notifyForwarded(sigs)
	defer signal.Stop(sigs)
	var w shardSet
	for restarts := 1; ; restarts++ {
		live, code, err := w.waitForSet(ctx, m, sigs, settle)
		if live == nil {
			return code, err
		}
		end := sr.runWith(ctx, c, m, opts, live, &w, sigs, settle)
		reason, code, err := shardAfter(end)
		if reason == "" {
			return code, err
		}
		if !errors.Is(end.stopped, errSetChanged) { // a lease lost: fence says so
			if log, lerr := logging.New(cmp.Or[io.Writer](opts.Stderr, os.Stderr), opts.LogFormat, "debug"); lerr == nil {
				log.Info(fmt.Sprintf("%v; restarting with the shards left", end.err))
			}
		}
		if sr.OnRestart != nil {
			sr.OnRestart(restarts, nil, reason)
		}
	}
}

// shardSet is the member's live set as the Runner last saw it, and since
// when it is unchanged: one for the whole of Run, seen by the waiting step
// and, during each run, by the watcher.
type shardSet struct {
	set   []int
	since time.Time
}

// look decides, at now, on the command running with the set cmd (none:
// nil) and the member's live set (settled: its whole target, nothing
// pending): the reason to (re)start it with live (empty: not now), and how
// long to wait at most before looking again (0: until a change). It
// restarts at once for shards of cmd given up (why); else once live
// differs from cmd (no command starts with no shard) and the member is
// settled or live has been unchanged for settle.
func (w *shardSet) look(now time.Time, why []string, cmd, live []int, settled bool, settle time.Duration) (reason string, wait time.Duration) {
	if w.since.IsZero() || !slices.Equal(live, w.set) {
		w.set, w.since = live, now
	}
	unchanged := now.Sub(w.since)
	switch {
	case len(why) > 0:
		return strings.Join(why, "; "), 0
	case slices.Equal(cmd, live):
		return "", 0
	case settled || unchanged >= settle:
		return "set " + ranges(cmd) + " → " + ranges(live), 0
	}
	return "", max(settle-unchanged, time.Millisecond)
}

// waitForSet releases the shards whose context ended and waits for a set
// to run the command with. Without one (nil) it returns why fence ends:
// the member left (76), ctx ended, or a signal came while no command ran.
func (w *shardSet) waitForSet(ctx context.Context, m *shards.Member, sigs <-chan os.Signal, settle time.Duration) (live []*shards.Shard, code int, err error) {
	for {
		releaseEnded(ctx, m)
		live = liveShards(m)
		reason, wait := w.look(time.Now(), nil, nil, numbers(live), m.Settled(), settle)
		if reason != "" {
			select {
			case s := <-sigs: // came after the last run: no command would get it
				code, err = interruptedWhile(s.(syscall.Signal), "no command ran")
				return nil, code, err
			default:
			}
			return live, 0, nil
		}
		select {
		case <-m.Changed():
		case <-after(wait):
		case <-m.Done():
			return nil, exitcode.LeaseLost, m.Err()
		case <-ctx.Done():
			return nil, exitcode.Failure, context.Cause(ctx)
		case s := <-sigs:
			code, err = interruptedWhile(s.(syscall.Signal), "no command ran")
			return nil, code, err
		}
	}
}

// after is time.After(d), or never for 0.
func after(d time.Duration) <-chan time.Time {
	if d == 0 {
		return nil
	}
	return time.After(d)
}

// releaseEnded releases the member's shards whose context ended.
func releaseEnded(ctx context.Context, m *shards.Member) {
	for _, s := range m.Shards() {
		if s.Context().Err() != nil {
			releaseBounded(ctx, s.Release)
		}
	}
}

// liveShards is the member's shards whose context has not ended.
func liveShards(m *shards.Member) []*shards.Shard {
	var live []*shards.Shard
	for _, s := range m.Shards() {
		if s.Context().Err() == nil {
			live = append(live, s)
		}
	}
	return live
}

// shardRunEnd is how one run of the command under a set ended.
type shardRunEnd struct {
	code int
	err  error
	// stopped is the cause of the run's context (errSetChanged: the
	// watcher restarts it).
	stopped error
	// signalled: a signal to fence came while the command ran (the Runner
	// forwarded it): fence ends with the command.
	signalled bool
	// late: a signal that came once the run's context had ended (the
	// command was being stopped to restart it) until the Runner returned:
	// fence ends instead of restarting (0: none).
	late syscall.Signal
	// left: why the member left the group (nil: it has not).
	left error
}

// runWith runs the command once under live's HeldSet, until it ends or
// the watcher stops it for a change of the set.
func (sr *ShardRunner) runWith(ctx context.Context, c coord.Coordinator, m *shards.Member, opts Options, live []*shards.Shard, w *shardSet, sigs <-chan os.Signal, settle time.Duration) shardRunEnd {
	helds := make([]*fencing.Held, len(live))
	for i, s := range live {
		helds[i] = s.Held()
	}
	hs := NewHeldSet(helds, shardEnv(m, live, opts))
	sr.cur.Store(hs)

	rctx, cancel := context.WithCancelCause(ctx)
	var signalled bool
	var late syscall.Signal
	runDone := make(chan struct{})
	watchDone := make(chan struct{})
	go func() {
		defer close(watchDone)
		signalled = watchSet(rctx, cancel, m, live, w, sigs, settle)
		// The signals from the end of rctx until the Runner returned: the
		// last one is late.
		for {
			select {
			case <-runDone:
				return
			case s := <-sigs:
				late = s.(syscall.Signal)
			}
		}
	}()
	o := opts
	o.Holds = hs
	if h := opts.Handover; h != nil {
		// fence gone, the member is gone: its own lease ends after the
		// shards', and the others take them at once.
		hc := *h
		hc.Also = append(slices.Clone(h.Also), m.Lease())
		o.Handover = &hc
	}
	r, err := Start(o)
	code := exitcode.Failure
	if err == nil {
		code, err = r.Run(rctx, c) // it ends the watchdog
	}
	stopped := context.Cause(rctx)
	var left error
	if m.Context().Err() != nil {
		<-m.Done()
		left = m.Err()
	}
	cancel(nil)
	close(runDone)
	<-watchDone
	hs.Close()
	sr.cur.Store(nil)
	return shardRunEnd{code: code, err: err, stopped: stopped, signalled: signalled, late: late, left: left}
}

// watchSet is the watcher of a run until its context ends: it records a
// signal to fence (the Runner forwards it to the command) and, at each
// change of the member, cancels rctx (errSetChanged, with the reason) when
// w.look says the command must restart. It reports whether a signal came.
func watchSet(rctx context.Context, cancel context.CancelCauseFunc, m *shards.Member, live []*shards.Shard, w *shardSet, sigs <-chan os.Signal, settle time.Duration) (signalled bool) {
	var tc <-chan time.Time
	cmd := numbers(live)
	for {
		select {
		case <-rctx.Done():
			return signalled
		case <-sigs:
			signalled = true // forwarded by the Runner; fence ends after the command
			continue
		case <-m.Changed():
		case <-tc:
		}
		why := stopReasons(factsOf(live))
		reason, wait := w.look(time.Now(), why, cmd, numbers(liveShards(m)), m.Settled(), settle)
		if reason != "" {
			cancel(fmt.Errorf("%w: %s", errSetChanged, reason))
			return signalled
		}
		tc = after(wait)
	}
}

// shardFact is what the watcher knows of one shard of the command's set.
type shardFact struct {
	ended bool   // its context ended
	lost  bool   // its lease was lost: the Runner stops the command for that
	cause string // its context's cause, when ended
}

func factsOf(live []*shards.Shard) []shardFact {
	out := make([]shardFact, len(live))
	for i, s := range live {
		out[i] = shardFact{ended: s.Context().Err() != nil, lost: errors.Is(context.Cause(s.Held().Context()), coord.ErrLeaseLost)}
		if out[i].ended {
			out[i].cause = context.Cause(s.Context()).Error()
		}
	}
	return out
}

// stopReasons are why the command must restart for shards of its set whose
// context ended (moved away or revoked, each cause naming its shard; the
// member left, one cause for all; a loss is the Runner's to stop), each
// once.
func stopReasons(facts []shardFact) []string {
	var why []string
	for _, f := range facts {
		if f.ended && !f.lost && !slices.Contains(why, f.cause) {
			why = append(why, f.cause)
		}
	}
	return why
}

// shardAfter decides what follows a run that ended as e: the reason to
// restart the command (the set changed, or a shard's lease was lost and
// the command stopped in time: it starts again with the shards left), or
// none: fence ends with code and err. A signal that came while the command
// ran ends fence with it; the member gone (its own lease revoked or lost),
// with 76; a signal while the command was stopped for a restart, with
// 128+N.
func shardAfter(e shardRunEnd) (reason string, code int, err error) {
	switch {
	case e.signalled:
	case e.left != nil && e.code != 0: // stopped for that, not to restart
		return "", exitcode.LeaseLost, e.left
	case e.late != 0 && (errors.Is(e.stopped, errSetChanged) || e.code == exitcode.LeaseLost && e.left == nil):
		code, err = interruptedWhile(e.late, "the command was stopped to restart it")
		return "", code, err
	case errors.Is(e.stopped, errSetChanged):
		return e.stopped.Error(), 0, nil
	case e.code == exitcode.LeaseLost && e.left == nil:
		return fmt.Sprintf("lost a lease: %v", e.err), 0, nil
	}
	return "", e.code, e.err
}

func numbers(ss []*shards.Shard) []int {
	out := make([]int, len(ss))
	for i, s := range ss {
		out[i] = s.Number
	}
	slices.Sort(out)
	return out
}

// shardEnv is what the command learns of its shards.
func shardEnv(m *shards.Member, live []*shards.Shard, opts Options) map[string]string {
	var ns, ts []string
	for _, s := range live {
		ns = append(ns, strconv.Itoa(s.Number))
		ts = append(ts, strconv.Itoa(s.Number)+":"+strconv.FormatUint(s.Held().Token(), 10))
	}
	ttl := opts.TTL
	if len(live) > 0 {
		ttl = live[0].Held().Lease().TTL
	}
	return map[string]string{
		"FENCE_GROUP":        opts.Lock, // the group
		"FENCE_MEMBER":       m.ID(),
		"FENCE_SHARDS":       strings.Join(ns, ","),
		"FENCE_SHARD_TOKENS": strings.Join(ts, ","),
		"FENCE_HOLDER":       m.ID(),
		"FENCE_TTL":          strconv.FormatFloat(ttl.Seconds(), 'f', -1, 64),
	}
}

// ranges writes shard numbers as "0-3,7" ("none" for none).
func ranges(ns []int) string {
	if len(ns) == 0 {
		return "none"
	}
	return output.Ranges(ns)
}
