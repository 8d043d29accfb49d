package supervise

import (
	"context"
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fence-dev/fence/internal/exitcode"
	"github.com/fence-dev/fence/pkg/coord"
)

// TestTooSmallTTLRefused: with the default grace, margin and renewal
// interval, two renewals fit before the stop signal only for a TTL above
// 750ms (2·TTL/3 < TTL − TTL/5 − 100ms). Every TTL up to there is refused
// with the same explanation, also those of a few nanoseconds, whose
// fractions once rounded down to zero and passed; the next ones are
// accepted.
func TestTooSmallTTLRefused(t *testing.T) {
	var ttls []time.Duration
	for d := time.Duration(1); d <= 2000; d++ {
		ttls = append(ttls, d)
	}
	for d := 2 * time.Microsecond; d <= 750*time.Millisecond; d = d*3/2 + 1 {
		ttls = append(ttls, d)
	}
	ttls = append(ttls, 600*time.Millisecond, 750*time.Millisecond)
	for _, ttl := range ttls {
		_, err := check(Options{Lock: "l", Command: []string{"true"}, TTL: ttl})
		if err == nil || !errors.Is(err, coord.ErrInvalid) || !strings.Contains(err.Error(), "leaves no room for two renewal attempts") {
			t.Fatalf("--ttl %v: %v; want it refused: no room for two renewal attempts", ttl, err)
		}
		if strings.Contains(err.Error(), "(every 0s)") {
			t.Fatalf("--ttl %v: %v", ttl, err)
		}
	}
	for _, ttl := range []time.Duration{751 * time.Millisecond, time.Second, 15 * time.Second, 7 * 24 * time.Hour} {
		p, err := check(Options{Lock: "l", Command: []string{"true"}, TTL: ttl})
		if err != nil {
			t.Fatalf("--ttl %v refused: %v", ttl, err)
		}
		if 3*p.interval < ttl || 5*p.grace < min(ttl, 25*time.Second) {
			t.Fatalf("--ttl %v: interval %v, grace %v", ttl, p.interval, p.grace)
		}
	}
}

// TestCheck: every setting check refuses, with the words that say why, and
// the defaults it fills in for what it accepts.
func TestCheck(t *testing.T) {
	ok := func(o Options) Options {
		if o.Lock == "" {
			o.Lock = "l"
		}
		if o.Command == nil {
			o.Command = []string{"true"}
		}
		if o.TTL == 0 {
			o.TTL = 15 * time.Second
		}
		return o
	}
	for _, c := range []struct {
		name string
		o    Options
		want string // in the error
	}{
		{"no lock", Options{Lock: "", Command: []string{"true"}, TTL: time.Second}, "lock name"},
		{"bad lock", ok(Options{Lock: "a\x00b"}), "lock name"},
		{"no TTL", Options{Lock: "l", Command: []string{"true"}}, "TTL must be positive"},
		{"negative TTL", ok(Options{TTL: -time.Second}), "TTL must be positive"},
		{"TTL too long", ok(Options{TTL: 7*24*time.Hour + 1}), "exceeds the maximum"},
		{"no command", Options{Lock: "l", TTL: time.Second, Command: []string{}}, "no command to run"},
		{"--shell, two strings", ok(Options{Shell: true, Command: []string{"echo", "hi"}}), "--shell takes the command as one string, got 2 arguments"},
		{"empty command", ok(Options{Command: []string{""}}), "the command is empty"},
		{"empty --shell command", ok(Options{Shell: true, Command: []string{""}}), "the command is empty"},
		{"negative --wait", ok(Options{Wait: -time.Second}), "--wait must not be negative"},
		{"negative --deadline", ok(Options{Deadline: -time.Second}), "--deadline must be positive"},
		{"negative --grace", ok(Options{Grace: -time.Second}), "--grace must not be negative"},
		{"negative margin", ok(Options{Margin: -time.Second}), "margin and renew interval must not be negative"},
		{"negative interval", ok(Options{RenewInterval: -time.Second}), "margin and renew interval must not be negative"},
		{"conflict code 256", ok(Options{ConflictExitCode: 256}), "--conflict-exit-code must be 0 to 255, got 256"},
		{"conflict code -1", ok(Options{ConflictExitCode: -1}), "--conflict-exit-code must be 0 to 255, got -1"},
		{"--once with a set", Options{Locks: []string{"a", "b"}, Command: []string{"true"}, TTL: 15 * time.Second, Once: "k"}, "--once takes one lock, not 2"},
		{"signal 65", ok(Options{Signal: 65}), "--signal 65 is not a signal"},
		{"signal -1", ok(Options{Signal: -1}), "--signal -1 is not a signal"},
		{"STOP", ok(Options{Signal: syscall.SIGSTOP}), "--signal STOP does not end a process"},
		{"TSTP", ok(Options{Signal: syscall.SIGTSTP}), "--signal TSTP does not end a process"},
		{"TTIN", ok(Options{Signal: syscall.SIGTTIN}), "--signal TTIN does not end a process"},
		{"TTOU", ok(Options{Signal: syscall.SIGTTOU}), "--signal TTOU does not end a process"},
		{"CONT", ok(Options{Signal: syscall.SIGCONT}), "--signal CONT does not end a process"},
		{"grace eats the TTL", ok(Options{TTL: 2 * time.Second, Grace: time.Second}), "leaves no room for two renewal attempts (every 667ms)"},
		{"slow renewals", ok(Options{RenewInterval: 6 * time.Second}), "leaves no room for two renewal attempts (every 6s)"},
		{"margin eats the TTL", ok(Options{Margin: 5 * time.Second}), "leaves no room for two renewal attempts"},
		{"--no-renew covers nothing", ok(Options{NoRenew: true, TTL: time.Second, Grace: 900 * time.Millisecond}), "does not cover --grace 900ms plus the safety margin 100ms"},
		{"--no-renew deadline too long", ok(Options{NoRenew: true, Deadline: 11 * time.Second}), "--deadline 11s exceeds what a --no-renew lease of --ttl 15s covers: 10.5s (TTL - grace 3s - margin 1.5s)"},
	} {
		_, err := check(c.o)
		if err == nil || !errors.Is(err, coord.ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v; want ErrInvalid saying %q", c.name, err, c.want)
		}
	}

	for _, c := range []struct {
		name                    string
		o                       Options
		grace, margin, interval time.Duration
		signal                  syscall.Signal
	}{
		{"defaults", ok(Options{}), 3 * time.Second, 1500 * time.Millisecond, 5 * time.Second, syscall.SIGTERM},
		{"long TTL: capped grace and margin", ok(Options{TTL: time.Minute}), 5 * time.Second, 2 * time.Second, 20 * time.Second, syscall.SIGTERM},
		{"short TTL", ok(Options{TTL: time.Second}), 200 * time.Millisecond, 100 * time.Millisecond, 333333334, syscall.SIGTERM},
		{"given", ok(Options{Grace: time.Second, Margin: 500 * time.Millisecond, RenewInterval: 2 * time.Second, Signal: syscall.SIGINT}),
			time.Second, 500 * time.Millisecond, 2 * time.Second, syscall.SIGINT},
		{"--signal KILL", ok(Options{Signal: syscall.SIGKILL}), 3 * time.Second, 1500 * time.Millisecond, 5 * time.Second, syscall.SIGKILL},
		{"signal 64", ok(Options{Signal: 64}), 3 * time.Second, 1500 * time.Millisecond, 5 * time.Second, 64},
		{"--wait forever", ok(Options{Wait: coord.WaitForever}), 3 * time.Second, 1500 * time.Millisecond, 5 * time.Second, syscall.SIGTERM},
		{"conflict code 255", ok(Options{ConflictExitCode: 255}), 3 * time.Second, 1500 * time.Millisecond, 5 * time.Second, syscall.SIGTERM},
		{"--shell", ok(Options{Shell: true, Command: []string{"echo hi"}}), 3 * time.Second, 1500 * time.Millisecond, 5 * time.Second, syscall.SIGTERM},
		// A fixed lease is never renewed: the two renewals need not fit.
		{"--no-renew, short", ok(Options{NoRenew: true, TTL: 500 * time.Millisecond}), 100 * time.Millisecond, 100 * time.Millisecond, 166666667, syscall.SIGTERM},
		{"--no-renew, deadline = cover", ok(Options{NoRenew: true, Deadline: 10500 * time.Millisecond}), 3 * time.Second, 1500 * time.Millisecond, 5 * time.Second, syscall.SIGTERM},
	} {
		p, err := check(c.o)
		if err != nil {
			t.Errorf("%s: refused: %v", c.name, err)
			continue
		}
		if p.grace != c.grace || p.margin != c.margin || p.interval != c.interval || p.signal != c.signal {
			t.Errorf("%s: grace %v, margin %v, interval %v, signal %v; want %v, %v, %v, %v",
				c.name, p.grace, p.margin, p.interval, p.signal, c.grace, c.margin, c.interval, c.signal)
		}
	}
}

// TestScrubEnvCredentials: fence's credentials never reach the command;
// PGPASSWORD is fence's own when its coordinator is PostgreSQL, and the
// command's own otherwise.
func TestScrubEnvCredentials(t *testing.T) {
	env := []string{"PATH=/bin", "FENCE_PASSWORD=x", "FENCE_ETCD_SECRET=y", "PGPASSWORD=pw", "FENCE_POSTGRES=postgres://h/db"}
	has := func(env []string, k string) bool {
		for _, kv := range env {
			if strings.HasPrefix(kv, k+"=") {
				return true
			}
		}
		return false
	}
	pg := scrubEnv(env, map[string]string{"FENCE_POSTGRES": "postgres://h/db", "FENCE_POSTGRES_SCHEMA": "fence"})
	for _, k := range []string{"FENCE_PASSWORD", "FENCE_ETCD_SECRET", "PGPASSWORD"} {
		if has(pg, k) {
			t.Errorf("postgres coordinator: %s passed on: %q", k, pg)
		}
	}
	if !has(pg, "PATH") || !has(pg, "FENCE_POSTGRES") {
		t.Errorf("postgres coordinator: env %q lacks PATH or FENCE_POSTGRES", pg)
	}
	local := scrubEnv(env, map[string]string{"FENCE_STATE_DIR": "/s"})
	if !has(local, "PGPASSWORD") || has(local, "FENCE_PASSWORD") || has(local, "FENCE_POSTGRES") {
		t.Errorf("local coordinator: env %q; want the command's PGPASSWORD kept, fence's own dropped", local)
	}
}

// TestAcquireFailure: a failed acquisition's exit code and message: a
// signal first (128+n), then a busy lock (--conflict-exit-code), then the
// run's own context, else the error as it is.
func TestAcquireFailure(t *testing.T) {
	p := &plan{Options: Options{Lock: "l", ConflictExitCode: 7}}
	live := context.Background()
	done, cancel := context.WithCancelCause(context.Background())
	cancel(errors.New("stop"))
	intr, cancelIntr := context.WithCancelCause(context.Background())
	cancelIntr(interrupted{syscall.SIGINT})
	other := errors.New("boom")
	for _, tc := range []struct {
		name      string
		ctx, actx context.Context
		err       error
		code      int
		msg       string
	}{
		{"signal", live, intr, coord.ErrBusy, 130, `interrupted by SIGINT while waiting for "l"`},
		{"busy", done, done, coord.ErrBusy, 7, coord.ErrBusy.Error()},
		{"ended", done, done, other, exitcode.Failure, `waiting for "l": stop`},
		{"error", live, live, other, exitcode.Failure, "boom"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, err := acquireFailure(tc.ctx, context.Cause(tc.actx), p, tc.err)
			if code != tc.code || err == nil || err.Error() != tc.msg {
				t.Errorf("acquireFailure = %d, %v; want %d, %s", code, err, tc.code, tc.msg)
			}
		})
	}
}
