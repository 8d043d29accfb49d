package supervise

import (
	"cmp"
	"fmt"
	"io"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/fencing"
)

// Options says what `fence run` does. Lock, Command and TTL are required.
type Options struct {
	// Lock is the lock's name.
	Lock string
	// Command is the command and its arguments. With Shell it must be one
	// string, run as /bin/sh -c STRING (nothing of fence's is interpolated
	// into it).
	Command []string
	Shell   bool
	// TTL is the lease's requested TTL (the contract's default is 15s).
	TTL time.Duration
	// Holder names the holder (default coord.DefaultHolder()).
	Holder string
	// Wait is how long to wait for the lock, as coord.AcquireOptions.Wait:
	// 0 does not wait, coord.WaitForever waits until acquired.
	Wait time.Duration
	// Deadline (0: none) limits the command's run time: the stop sequence
	// starts when it has passed (exit 124). With NoRenew it defaults to, and
	// may not exceed, what the lease covers: TTL - margin - grace.
	Deadline time.Duration
	// Grace is the time between the stop signal and SIGKILL (0: DefaultGrace).
	Grace time.Duration
	// Signal starts the stop sequence (0: SIGTERM).
	Signal syscall.Signal
	// NoRenew takes a fixed lease that is never renewed.
	NoRenew bool
	// ConflictExitCode is the exit code when the lock is busy. The zero
	// value is exit code 0; the CLI passes --conflict-exit-code
	// (exitcode.Busy by default).
	ConflictExitCode int
	// Once, when set, runs the command at most once to success for this key
	// of the lock (`--once KEY`, coord.Coordinator.Complete): a completion record is
	// checked before the wait and once the lease is held, and written when
	// the command exits 0 while the lease is safe.
	Once string
	// OnceKeep is how long the completion record is kept (0:
	// coord.DefaultKeep).
	OnceKeep time.Duration
	// DoneExitCode is the exit code when the job was done already (the
	// zero value is exit code 0, the CLI's default).
	DoneExitCode int
	// Slots, above 1, takes Lock as a semaphore of that many holders
	// (coord.AcquireOptions.Slots); the command gets its slot in
	// FENCE_SLOT. Not with Locks, Holds or Once.
	Slots int
	// Quiet keeps fence's "waiting for" line off a terminal (-q).
	Quiet bool
	// MetricsFile, when set, receives a Prometheus textfile at exit.
	MetricsFile string
	// Verbose reports each step on Stderr (what Run writes without it: see
	// Run).
	Verbose bool
	// LogFormat is the style of fence's own lines on Stderr: "text" (or
	// "": "fence: warning: ...") or "json" (log/slog's, one object per
	// line), as --log-format says.
	LogFormat string

	// Stdin, Stdout and Stderr are the command's (nil: the process's own).
	// Files are passed on as they are; other readers and writers through
	// pipes.
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	// Env is the environment the command inherits (nil: os.Environ()),
	// before fence removes credentials and sets FENCE_*.
	Env []string
	// Location is set in the command's environment, replacing inherited
	// values, so that nested fence calls reach the same coordinator:
	// FENCE_STATE_DIR for local, FENCE_ENDPOINTS and FENCE_PREFIX for etcd
	// (and TLS file settings where used), FENCE_POSTGRES (without its
	// password) and FENCE_POSTGRES_SCHEMA for PostgreSQL. Inherited ones
	// (locationVars) not named here are removed.
	Location map[string]string

	// Margin and RenewInterval tune the lease (0: fencing's defaults,
	// fencing.DefaultMargin and TTL/3).
	Margin, RenewInterval time.Duration
	// OnAcquired, when set, is called once the lease (every lease of Locks)
	// is held, before the command is started, with the writer of fence's
	// own lines (serialized with them).
	OnAcquired func(stderr io.Writer) `json:"-"`
	// NoCgroup keeps the command out of a cgroup of its own even where one
	// could be made; the watchdog then finds the command's descendants as
	// their subreaper.
	NoCgroup bool

	// Locks, when set, are several locks to hold at once (`fence run A B
	// C`), instead of Lock: Run takes them in byte order of their names
	// (fencing.AcquireSet), all or none within Wait, runs the command under
	// all of them (stopped before the earliest can expire, and when any is
	// lost) and releases them in reverse order. The command's environment
	// names them in the order given (FENCE_LOCKS, FENCE_LOCK_i, ...). Lock,
	// when empty, becomes the names joined by commas (messages, metrics).
	Locks []string

	// Holds, when set, are leases the caller holds and releases itself
	// (`fence shards run`): the command runs under them, stopped before
	// the earliest can expire, and Wait, NoRenew and ConflictExitCode do
	// not apply. Lock names them in messages (the group).
	Holds *HeldSet

	// Handover, when set, lets the watchdog end the command's leases
	// itself when fence is gone (see the package doc). Without it, or when
	// the watchdog cannot reach the coordinator within a few seconds, the
	// leases expire at their TTL.
	Handover *Handover `json:"-"`
}

// Handover is what the watchdog needs to end the leases when fence is
// gone: it hands Coordinator's settings and the leases to its LeaseEnder
// (see WatchdogMain).
type Handover struct {
	// Coordinator returns the settings of the coordinator, opaque to this
	// package, for the watchdog's LeaseEnder. It is called once the leases
	// are held (the caller's configuration is complete then), and its
	// result goes to the watchdog in the start order over the order pipe:
	// never in an argument or the command's environment, so it may hold
	// credentials. nil, or an error, leaves the leases to expire.
	Coordinator func() ([]byte, error)
	// Also are leases ended after the command's own: a shard member's own
	// lease (ShardRunner sets it).
	Also []coord.Lease
}

// DefaultGrace is the grace period used when none is given: a fifth of the
// TTL (rounded up), at most 5s.
func DefaultGrace(ttl time.Duration) time.Duration { return min(ceilDiv(ttl, 5), 5*time.Second) }

// ceilDiv is d/n rounded up (d >= 0, n > 0): the grace, margin and renewal
// interval that check weighs are never 0 for a TTL of a few nanoseconds
// ("two renewals of 0s fit in 1ns" would pass checkTiming).
func ceilDiv(d time.Duration, n int64) time.Duration {
	q := d / time.Duration(n)
	if d%time.Duration(n) != 0 {
		q++
	}
	return q
}

// plan is Options checked and completed.
type plan struct {
	Options
	grace, margin, interval time.Duration
	signal                  syscall.Signal
}

// Check reports what Start would refuse in opts, without starting a
// watchdog: for a caller that must refuse bad settings before it takes a
// lease of its own (fence shards run).
func Check(opts Options) error {
	_, err := check(opts)
	return err
}

// check validates opts and fills in defaults. Errors wrap coord.ErrInvalid
// and say which setting is wrong and why; each step checks one part, in
// the order of the first error reported.
func check(opts Options) (*plan, error) {
	p := &plan{Options: opts}
	for _, step := range []func(*plan) error{checkTarget, checkCommand, checkBounds, checkOnceAndSlots, checkSignal, checkTiming} {
		if err := step(p); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// checkTarget checks the lock (or locks) and the TTL. The names of Locks
// are checked by the CLI, and again by fencing.AcquireSet before it takes
// any (invalid or given twice: coord.ErrInvalid).
func checkTarget(p *plan) error {
	switch {
	case len(p.Locks) > 0 && p.Holds != nil:
		return fmt.Errorf("%w: Locks and Holds do not go together", coord.ErrInvalid)
	case len(p.Locks) > 0:
		p.Lock = cmp.Or(p.Lock, strings.Join(p.Locks, ","))
	default:
		if err := coord.ValidateName(p.Lock); err != nil {
			return err
		}
	}
	return coord.ValidateTTL(p.TTL)
}

// checkCommand checks that there is a command, one string with --shell.
func checkCommand(p *plan) error {
	switch {
	case len(p.Command) == 0:
		return fmt.Errorf("%w: no command to run", coord.ErrInvalid)
	case p.Shell && len(p.Command) != 1:
		return fmt.Errorf("%w: --shell takes the command as one string, got %d arguments (quote it)", coord.ErrInvalid, len(p.Command))
	case p.Command[0] == "":
		return fmt.Errorf("%w: the command is empty", coord.ErrInvalid)
	}
	return nil
}

// checkBounds checks the durations and the conflict exit code.
func checkBounds(p *plan) error {
	switch {
	case p.Wait < 0 && p.Wait != coord.WaitForever:
		return fmt.Errorf("%w: --wait must not be negative, got %v", coord.ErrInvalid, p.Wait)
	case p.Deadline < 0:
		return fmt.Errorf("%w: --deadline must be positive, got %v", coord.ErrInvalid, p.Deadline)
	case p.Grace < 0:
		return fmt.Errorf("%w: --grace must not be negative, got %v", coord.ErrInvalid, p.Grace)
	case p.Margin < 0 || p.RenewInterval < 0:
		return fmt.Errorf("%w: margin and renew interval must not be negative", coord.ErrInvalid)
	case p.ConflictExitCode < 0 || p.ConflictExitCode > 255:
		return fmt.Errorf("%w: --conflict-exit-code must be 0 to 255, got %d", coord.ErrInvalid, p.ConflictExitCode)
	}
	return nil
}

// checkOnceAndSlots checks --once, its keep, --slots and --done-exit-code.
// Slots without a clear meaning are refused: above 1 with several locks
// (one semaphore, or several locks of one slot each?), with Holds, or with
// Once (a semaphore's holders would each run the job once); so is Once with
// several locks.
func checkOnceAndSlots(p *plan) error {
	if p.Once != "" {
		if err := coord.ValidateKey(p.Once); err != nil {
			return err
		}
	}
	if err := coord.ValidateKeep(p.OnceKeep); err != nil {
		return err
	}
	switch {
	case p.Slots < 0 || p.Slots > coord.MaxSlots:
		return fmt.Errorf("%w: --slots %d is out of range (1 to %d)", coord.ErrInvalid, p.Slots, coord.MaxSlots)
	case p.Slots > 1 && len(p.Locks) > 0:
		return fmt.Errorf("%w: --slots %d takes one lock, not %d: run a fence per semaphore", coord.ErrInvalid, p.Slots, len(p.Locks))
	case p.Slots > 1 && p.Holds != nil:
		return fmt.Errorf("%w: --slots does not go with Holds", coord.ErrInvalid)
	case p.Once != "" && len(p.Locks) > 0:
		return fmt.Errorf("%w: --once takes one lock, not %d (the completion record belongs to one lock)", coord.ErrInvalid, len(p.Locks))
	case p.Slots > 1 && p.Once != "":
		return fmt.Errorf("%w: --slots %d and --once conflict: a job run at most once needs no more than one holder", coord.ErrInvalid, p.Slots)
	case p.DoneExitCode < 0 || p.DoneExitCode > 255:
		return fmt.Errorf("%w: --done-exit-code must be 0 to 255, got %d", coord.ErrInvalid, p.DoneExitCode)
	}
	return nil
}

// checkSignal sets the stop signal (SIGTERM by default) and checks that it
// ends a process.
func checkSignal(p *plan) error {
	p.signal = cmp.Or(p.Signal, syscall.SIGTERM)
	if p.signal < 1 || p.signal > 64 {
		return fmt.Errorf("%w: --signal %d is not a signal", coord.ErrInvalid, int(p.signal))
	}
	switch p.signal {
	case syscall.SIGSTOP, syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU, syscall.SIGCONT:
		return fmt.Errorf("%w: --signal %s does not end a process", coord.ErrInvalid, SignalName(p.signal))
	}
	return nil
}

// checkTiming fills in the grace, margin and renewal interval and checks
// that the TTL covers them: with --no-renew, a window to run the command
// (and the deadline within it); else two renewal attempts before the
// command must be stopped.
func checkTiming(p *plan) error {
	ttl := p.TTL
	p.grace = cmp.Or(p.Grace, DefaultGrace(ttl))
	p.margin = cmp.Or(p.Margin, fencing.DefaultMargin(ttl))
	p.interval = cmp.Or(p.RenewInterval, ceilDiv(ttl, 3))
	covered := ttl - p.margin - p.grace // from the grant's send to the stop signal
	switch {
	case p.NoRenew && covered <= 0:
		return fmt.Errorf("%w: --ttl %v does not cover --grace %v plus the safety margin %v: nothing is left to run the command",
			coord.ErrInvalid, ttl, p.grace, p.margin)
	case p.NoRenew && p.Deadline > covered:
		return fmt.Errorf("%w: --deadline %v exceeds what a --no-renew lease of --ttl %v covers: %v (TTL - grace %v - margin %v)",
			coord.ErrInvalid, p.Deadline, ttl, covered, p.grace, p.margin)
	case !p.NoRenew && 2*p.interval >= covered:
		return fmt.Errorf("%w: --ttl %v with --grace %v and the safety margin %v leaves no room for two renewal attempts (every %v) before the command must be stopped; raise --ttl or lower --grace",
			coord.ErrInvalid, ttl, p.grace, p.margin, roundForDisplay(p.interval))
	}
	return nil
}

// roundForDisplay rounds d to milliseconds for a message, unless that would
// show a sub-millisecond interval as 0s.
func roundForDisplay(d time.Duration) time.Duration {
	if d < time.Millisecond {
		return d
	}
	return d.Round(time.Millisecond)
}

// SignalName is the name of sig without "SIG" ("TERM"), or its number.
func SignalName(sig syscall.Signal) string {
	if n := unix.SignalName(sig); n != "" {
		return strings.TrimPrefix(n, "SIG")
	}
	return strconv.Itoa(int(sig))
}

// ParseSignal reads a signal given as a name ("TERM", "SIGTERM", "term") or
// a number ("15"). The error wraps coord.ErrInvalid.
func ParseSignal(s string) (syscall.Signal, error) {
	t := strings.TrimSpace(s)
	if n, err := strconv.Atoi(t); err == nil {
		if n >= 1 && n <= 64 {
			return syscall.Signal(n), nil
		}
		return 0, fmt.Errorf("%w: signal number %d is out of range", coord.ErrInvalid, n)
	}
	u := strings.ToUpper(t)
	if !strings.HasPrefix(u, "SIG") {
		u = "SIG" + u
	}
	if sig := unix.SignalNum(u); sig != 0 {
		return sig, nil
	}
	return 0, fmt.Errorf("%w: unknown signal %q", coord.ErrInvalid, s)
}
