//go:build !fence_watchdog

package supervise

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/fence-dev/fence/internal/exitcode"
	"github.com/fence-dev/fence/pkg/clock"
	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/fencing"
	"github.com/fence-dev/fence/pkg/shards"
)

// ShardRunner is `fence shards run`: it runs the command under the shards
// a group member holds, each (re)start under a HeldSet of their leases,
// and restarts it (stop signal, grace) whenever the member's set changes.
// Give OnSafeUntil to the member's shards.Options.Hold.OnSafeUntil.
type ShardRunner struct {
	cur atomic.Pointer[HeldSet]
	// Restarts counts the restarts so far.
	Restarts atomic.Int64
	// OnRestart, when set, is called before each restart with the count,
	// the new set and why.
	OnRestart func(n int, set []int, reason string)
}

// OnSafeUntil is told of each renewal of a shard's lease.
func (sr *ShardRunner) OnSafeUntil(clock.Boot) {
	if s := sr.cur.Load(); s != nil {
		s.Renewed()
	}
}

var errSetChanged = errors.New("the member's shards changed")

// Run runs opts' command under m's shards until it exits on its own (its
// exit code), a signal ends fence, or m leaves the group (76). settle is
// how long the set must stay unchanged before the command is started with
// it when it is not yet all the map gives the member. Losing a shard's
// lease stops the command before that lease can expire (as fence run); the
// command is then started again with the shards left and those taken back.
func (sr *ShardRunner) Run(ctx context.Context, c coord.Coordinator, m *shards.Member, opts Options, settle time.Duration) (int, error) {
	sigs := make(chan os.Signal, 4)
	for _, s := range forwarded {
		if !signal.Ignored(s) {
			signal.Notify(sigs, s)
		}
	}
	defer signal.Stop(sigs)
	var sigSeen atomic.Value
	release := func() {
		for _, s := range m.Shards() {
			if s.Context().Err() != nil {
				rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
				_ = s.Release(rctx)
				cancel()
			}
		}
	}
	lastChange := time.Now()
	var lastSet []int
	reason := "started"
	for {
		// Wait for a set to run the command with.
		var live []*shards.Shard
		for {
			release()
			live = live[:0]
			for _, s := range m.Shards() {
				if s.Context().Err() == nil {
					live = append(live, s)
				}
			}
			set := numbers(live)
			if !slices.Equal(set, lastSet) {
				lastSet, lastChange = set, time.Now()
			}
			if len(live) > 0 && (m.Settled() || time.Since(lastChange) >= settle) {
				break
			}
			t := time.NewTimer(max(settle-time.Since(lastChange), time.Millisecond))
			select {
			case <-m.Changed():
			case <-t.C:
			case <-m.Done():
				t.Stop()
				return exitcode.LeaseLost, m.Err()
			case <-ctx.Done():
				t.Stop()
				return exitcode.Failure, context.Cause(ctx)
			case s := <-sigs:
				t.Stop()
				sig := s.(syscall.Signal)
				return 128 + int(sig), fmt.Errorf("interrupted by SIG%s while no command ran", SignalName(sig))
			}
			t.Stop()
		}
		helds := make([]*fencing.Held, len(live))
		for i, s := range live {
			helds[i] = s.Held()
		}
		hs := NewHeldSet(helds, shardEnv(m, live, opts))
		sr.cur.Store(hs)
		hs.Renewed()

		rctx, cancel := context.WithCancelCause(ctx)
		watchDone := make(chan struct{})
		go func() {
			defer close(watchDone)
			var since time.Time // when the live set first differed from the command's
			var tc <-chan time.Time
			for {
				select {
				case <-rctx.Done():
					return
				case s := <-sigs:
					sigSeen.Store(s) // forwarded by the Runner; fence ends after the command
					continue
				case <-m.Changed():
				case <-tc:
				}
				var why []string
				for _, s := range live {
					if s.Context().Err() != nil && !errors.Is(context.Cause(s.Held().Context()), coord.ErrLeaseLost) {
						// moved away or revoked (a loss is the Runner's to stop)
						msg := context.Cause(s.Context()).Error()
						if !strings.Contains(msg, fmt.Sprintf("shard %d ", s.Number)) && m.Context().Err() == nil {
							msg = fmt.Sprintf("shard %d: %s", s.Number, msg)
						}
						if !slices.Contains(why, msg) {
							why = append(why, msg)
						}
					}
				}
				changed := len(why) > 0
				var now []*shards.Shard
				for _, s := range m.Shards() {
					if s.Context().Err() == nil {
						now = append(now, s)
					}
				}
				if !slices.Equal(numbers(live), numbers(now)) {
					if since.IsZero() {
						since = time.Now()
						tc = time.After(settle)
					}
					// The rest arrived, or a settle time passed since the first.
					if m.Settled() || time.Since(since) >= settle {
						changed = true
					}
				}
				if changed {
					if len(why) == 0 {
						why = append(why, "set "+ranges(numbers(live))+" → "+ranges(numbers(now)))
					}
					cancel(fmt.Errorf("%w: %s", errSetChanged, strings.Join(why, "; ")))
					return
				}
			}
		}()
		o := opts
		o.Holds = hs
		r, err := Start(o)
		code := exitcode.Failure
		if err == nil {
			code, err = r.Run(rctx, c)
			r.Close()
		}
		stopped := context.Cause(rctx)
		cancel(nil)
		<-watchDone
		hs.Close()
		sr.cur.Store(nil)
		if sigSeen.Load() != nil {
			return code, err
		}
		if m.Context().Err() != nil && code != 0 {
			// The member left the group (its own lease was revoked or lost):
			// the command was stopped for that, not to restart.
			<-m.Done()
			return exitcode.LeaseLost, m.Err()
		}
		switch {
		case errors.Is(stopped, errSetChanged):
			reason = stopped.Error()
		case code == exitcode.LeaseLost && m.Context().Err() == nil:
			// One shard's lease was lost: the command was stopped in time.
			reason = fmt.Sprintf("lost a lease: %v", err)
			fmt.Fprintf(o.stderrOrDefault(), "fence: %v; restarting with the shards left\n", err)
		default:
			return code, err
		}
		n := int(sr.Restarts.Add(1))
		if sr.OnRestart != nil {
			sr.OnRestart(n, nil, reason)
		}
	}
}

func (o *Options) stderrOrDefault() interface{ Write([]byte) (int, error) } {
	if o.Stderr != nil {
		return o.Stderr
	}
	return os.Stderr
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
		ts = append(ts, strconv.Itoa(s.Number)+":"+strconv.FormatUint(s.Token(), 10))
	}
	ttl := opts.TTL
	if len(live) > 0 {
		ttl = live[0].Lease().TTL
	}
	return map[string]string{
		"FENCE_GROUP":        m.Group(),
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
	return shards.Ranges(ns)
}
