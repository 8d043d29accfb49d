package cli

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fence-dev/fence/internal/etcdbugs"
	"github.com/fence-dev/fence/internal/logging"
	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/coord/etcd"
	"github.com/fence-dev/fence/pkg/coord/postgres"
)

// The etcd members' versions are asked for their known lease-safety bugs,
// once per process, on the side: a member that does not answer (stalled or
// partitioned while the quorum lives) must not hold up the command's work.
// The warnings are printed once the answer is in: fence run looks
// when its lease is held (without waiting), and every command looks at its
// end, before the coordinator is closed, waiting for the answer until
// warnWait after the question began. An answer later than that warns
// nobody in this process. fence config and the dashboard, which show the
// versions, wait for the whole answer.

// versionTimeout bounds the question of the etcd members' versions.
const versionTimeout = time.Second

// warnWait is how long after the question began the end of a command waits
// for its answer, to print the warnings.
const warnWait = 100 * time.Millisecond

// versionQuestion is the question of the etcd members' versions (or of a
// PostgreSQL server's replication), asked at askedAt; done is closed once
// it is answered (or its bound passed). The zero value has asked nothing.
type versionQuestion struct {
	once     sync.Once
	askedAt  time.Time
	done     chan struct{}
	versions []etcd.MemberVersion // what the members reported, once done
	warn     string               // the coordinator's known problem, one line
	// short is the dashboard's and status's short form of warn, the bug
	// first so that a narrow status line keeps it: "lease bug etcd#15247
	// in etcd 3.4.23" ("" when none).
	short string

	printed atomic.Bool // the warning was up for printing once already
}

// versionAsker is the etcd coordinator (pkg/coord/etcd), which asks its
// members for their versions.
type versionAsker interface {
	ServerVersions(ctx context.Context) []etcd.MemberVersion
}

// replicationAsker is a PostgreSQL coordinator (pkg/coord/postgres),
// which tells whether it has standbys without synchronous replication.
type replicationAsker interface {
	ReplicationWarning(ctx context.Context) string
}

// ask asks backend, on a goroutine once per process within the question's
// bound (versionTimeout, or the dial timeout when shorter), for its known
// problem: an etcd member's version with a lease-safety bug, a PostgreSQL
// server's asynchronous standbys. done is closed with the answer. Other
// backends are asked nothing.
func (q *versionQuestion) ask(ctx context.Context, backend coord.Coordinator, dial time.Duration) {
	var answer func(context.Context)
	switch c := backend.(type) {
	case versionAsker:
		answer = func(ctx context.Context) {
			q.versions = c.ServerVersions(ctx)
			q.warn, q.short = etcdbugs.Warning(q.versions), shortBugs(q.versions)
		}
	case replicationAsker:
		answer = func(ctx context.Context) {
			if w := c.ReplicationWarning(ctx); w != "" {
				q.warn, q.short = w, postgres.ShortReplicationRisk
			}
		}
	default:
		return
	}
	q.once.Do(func() {
		done := make(chan struct{})
		q.askedAt, q.done = time.Now(), done
		go func() {
			defer close(done)
			actx, cancel := context.WithTimeout(ctx, min(versionTimeout, max(dial, 100*time.Millisecond)))
			defer cancel()
			answer(actx)
		}()
	})
}

// await waits for the whole answer (at most the question's bound), when
// one was asked: for fence config and the dashboard, which show the
// versions.
func (q *versionQuestion) await() {
	if q.done != nil {
		<-q.done
	}
}

// answered reports whether the answer is in; with wait, it waits for it
// until warnWait after the question began.
func (q *versionQuestion) answered(wait bool) bool {
	done := q.done
	if done == nil {
		return false
	}
	select {
	case <-done:
		return true
	default:
		if !wait {
			return false
		}
	}
	t := time.NewTimer(time.Until(q.askedAt.Add(warnWait)))
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	}
}

// shortBugs is the short form of the members' known bugs, one per
// version and bug.
func shortBugs(vs []etcd.MemberVersion) string {
	seen := map[string]bool{}
	var parts []string
	for _, v := range vs {
		for _, b := range etcdbugs.BugsOf(v.Version) {
			if k := v.Version + b.Issue; !seen[k] {
				seen[k] = true
				parts = append(parts, "lease bug "+b.Issue+" in etcd "+v.Version)
			}
		}
	}
	return strings.Join(parts, "; ")
}

// peekVersions prints the version warnings on w (nil: stderr) when the
// answer is in, without waiting; flushVersions waits for it until warnWait
// after the question began. Between them the warnings are printed once per
// process. Both must be called before the coordinator is closed (which
// ends the question).
func (f *Factory) peekVersions(w io.Writer) { f.printVersions(w, false, true) }

func (f *Factory) flushVersions(w io.Writer) { f.printVersions(w, true, true) }

// printVersions prints the version warning; daily, at most once a day on
// this host (warnDue), else whenever (fence config, where people look on
// purpose, which neither counts as the day's warning).
func (f *Factory) printVersions(w io.Writer, wait, daily bool) {
	q := &f.versions
	if !q.answered(wait) || !q.printed.CompareAndSwap(false, true) || q.warn == "" {
		return
	}
	if w == nil {
		w = f.IO.ErrOut
	}
	// A warning like every other: --log-level error and -q hide it.
	cfg, err := f.Config()
	if err != nil || cfg.Quiet {
		return
	}
	if lvl, err := logging.ParseLevel(cfg.LogLevel); err == nil && lvl > slog.LevelWarn {
		return
	}
	if daily && !warnDue(q.warn, f.Now()) {
		return
	}
	f.logLineTo(w, slog.LevelWarn, q.warn)
}

// coordinatorWarning is fence status's and show's coordinator_warning:
// the coordinator's known problem (versionQuestion.short), when
// their versions are in by warnWait after the question began ("" otherwise,
// and when there are none).
func (f *Factory) coordinatorWarning() string {
	if !f.versions.answered(true) {
		return ""
	}
	return f.versions.short
}
