package cli

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/fence-dev/fence/internal/config"
	"github.com/fence-dev/fence/internal/exitcode"
	"github.com/fence-dev/fence/internal/supervise"
	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/history"
)

type runOptions struct {
	leaseWait
	deadline, grace  time.Duration
	noRenew, shell   bool
	signal           string
	conflictExitCode int
	metricsFile      string
	once             string
	oncePer, onceFor time.Duration
	doneExitCode     int
	anyOrder         bool
	slots            int
}

func newCmdRun(f *Factory) *cobra.Command {
	o := &runOptions{}
	cmd := &cobra.Command{
		Use:   "run LOCK... [flags] -- COMMAND [ARG...]",
		Short: "Run a command as the holder of a lease, stopping it before the lease can expire",
		Long: `Take a lease on LOCK, run COMMAND as its holder, and keep the lease renewed
(every third of the TTL) while COMMAND runs. COMMAND gets the fencing token in
$FENCE_TOKEN (with FENCE_LOCK, FENCE_LEASE_ID, FENCE_HOLDER, FENCE_TTL, and
FENCE_DEADLINE when a deadline applies). COMMAND must follow "--", so that its
own flags are never taken for fence's.

COMMAND runs in its own process group under a watchdog process. When renewal
becomes uncertain (no acknowledged renewal in time, or fence finds it was
paused), the whole group gets --signal, then SIGKILL after --grace, all before
the lease can expire on the coordinator, even when fence itself is frozen; fence
exits 76. At --deadline (at least 100ms) the same stop runs and fence exits
124. If fence dies,
even by SIGKILL, the command's group is stopped too. The watchdog is not in
fence's process group, so a signal sent to that whole group (timeout(1), a
supervisor's group kill, a shell's job control: KILL or STOP) leaves it able to
stop the command in time. Not covered: fence and the watchdog both SIGKILLed at
once by PID (the command's main process dies with the watchdog, processes it
started may be left running); fence and the watchdog both frozen by PID
(SIGSTOP of each) on etcd: nothing is left to stop the command, the lease
expires and the next holder starts while the command runs on beside it (2.4
to 2.6 s measured); then only the fencing token protects the data: storage
that checks $FENCE_TOKEN (a guard, 'fence guard put', or the store's own
check) refuses the stale holder's writes. Outside Linux (macOS), processes that leave the command's group are
never stopped, and nothing stops the command if the watchdog dies.

SIGINT, SIGTERM and SIGHUP sent to fence go to the command's group; fence then
waits for it, releases the lease and exits with the command's status. Otherwise
fence exits with the command's own exit code (128+N when it died of signal N
that fence did not send), 75 when the lock was busy (--conflict-exit-code),
125 when fence itself failed, 126/127 when COMMAND could not be run.

--once KEY runs COMMAND at most once to success per (LOCK, KEY), across all
hosts that share the coordinator: fence looks for KEY's completion record
before it waits and again once it holds the lease, and when there is one it
takes no lease, runs nothing and exits 0 (--done-exit-code). When COMMAND
exits 0 while the lease is still safe, the record is written in one step with
the check that the lease is still held; a failed COMMAND leaves no record, so
the next attempt runs it. A lease lost before the record is written is exit
76. --once-per D is --once with KEY the start of the current period (UTC,
periods aligned to the Unix epoch: --once-per 24h is one run per UTC day).
Records are kept for --once-for (default 30 days); see 'fence once'. --once
takes one lock: with several locks, or with --slots, it is refused (125).

--slots N lets up to N hold LOCK at once (a semaphore; 1, the default, is a
lock): waiters are served first come, first served, and COMMAND gets its slot
in FENCE_SLOT (0 to N-1, the lowest free one; 0 for a lock) and a token of its
own, larger than every token issued before for the lock. Fence a per-slot
resource with a guard key that includes the slot. Every holder and waiter of a
lock uses the same N: another N while it has holders or waiters is refused
with exit 125 naming both (an idle lock takes the next caller's). --slots takes
one lock and does not go with --once. 'fence limit LOCK 1' makes a semaphore's
runs strictly serial.

Several locks (fence run A B C -- COMMAND) are always taken in byte order of
their names, whatever the order given, so that two runs that need overlapping
sets never deadlock; all or none within --wait (the locks taken are released
when one is busy: exit 75 naming it), released in reverse order. COMMAND gets
FENCE_LOCKS=N and FENCE_LOCK_i, FENCE_TOKEN_i, FENCE_LEASE_ID_i (i = 1..N, in
the order given) instead of FENCE_LOCK, FENCE_TOKEN and FENCE_LEASE_ID. Losing
any of the leases stops it (76, naming the lock).

A fence run started by a command that already runs under locks of the same
coordinator (an enclosing fence run) refuses, with exit 125, to take a lock
that sorts before one of them: nesting locks out of order is how two runs
deadlock. Take the locks in one run, or nest them in byte order;
--any-order allows it (and the deadlock).`,
		Example: `  fence run nightly-backup --ttl 30s -n -- /usr/local/bin/backup --token-from-env
  fence run report --deadline 10m --shell -- 'generate | upload "$FENCE_TOKEN"'
  fence run -q billing --once-per 24h -- /usr/local/bin/charge-customers
  fence run migrate --once "schema-v42" -- ./migrate up
  fence run backups --slots 3 --shell -- 'backup --target "pool-$FENCE_SLOT" --token "$FENCE_TOKEN"'
  fence run db/orders db/invoices --wait 1m --shell -- './compute-and-store.sh "$FENCE_TOKEN_1" "$FENCE_TOKEN_2"'`,
		Args: commandArgs("run", "lock", "[flags]", func(locks []string) error {
			return checkLocks("run", locks)
		}),
		ValidArgsFunction: completeLocks(f),
		RunE: func(cmd *cobra.Command, args []string) error {
			dash := cmd.ArgsLenAtDash()
			return runRun(cmd, f, o, args[:dash], args[dash:])
		},
	}
	fs := cmd.Flags()
	o.addFlags(fs)
	DurationVarP(fs, &o.deadline, "deadline", "", 0, false, "hard limit on the command's run time, at least 100ms (exit 124)")
	DurationVarP(fs, &o.grace, "grace", "", 0, false, "time between the stop signal and SIGKILL (default: TTL/5, at most 5s)")
	fs.StringVar(&o.signal, "signal", "TERM", "signal that starts the stop sequence")
	fs.BoolVar(&o.noRenew, "no-renew", false, "take a fixed lease that is never renewed; the deadline defaults to, and may not exceed, what it covers")
	fs.BoolVar(&o.shell, "shell", false, "COMMAND is one string run by /bin/sh -c")
	fs.IntVar(&o.conflictExitCode, "conflict-exit-code", exitcode.Busy, "exit code when the lock was not acquired in time")
	fs.StringVar(&o.metricsFile, "metrics-file", "", "write a Prometheus textfile here at exit")
	fs.StringVar(&o.once, "once", "", "run the command at most once to success for this key of the lock, across hosts")
	DurationVarP(fs, &o.oncePer, "once-per", "", 0, false, "--once with the key the start of the current period (UTC, aligned to the Unix epoch)")
	DurationVarP(fs, &o.onceFor, "once-for", "", coord.DefaultKeep, false, "how long a completion record is kept")
	fs.IntVar(&o.doneExitCode, "done-exit-code", 0, "exit code when the --once key was already done")
	fs.IntVar(&o.slots, "slots", 1, "let up to N hold the lock at once (a semaphore); the command gets its slot, 0 to N-1, in $FENCE_SLOT")
	fs.BoolVar(&o.anyOrder, "any-order", false, "take a lock that sorts before one an enclosing fence run holds (this is how nested runs deadlock)")
	return cmd
}

// MinDeadline is the shortest --deadline: the watchdog reads its clock every
// 100ms (supervise's recheck), so a shorter deadline could not be kept to
// its word, and one of 1ns or 1ms is a slip of the unit.
const MinDeadline = 100 * time.Millisecond

// commandArgs wants NAME (run's LOCK..., shards run's GROUP), "--" and a
// command after it; check checks the names before "--" (after the first
// was checked alone). The "--" is required: without it, flags meant for the
// command (`fence run L rsync -n ...`) would be taken as fence's own,
// silently. use is the command ("run"), noun its name ("lock"), flags what
// its usage line puts before "--".
func commandArgs(use, noun, flags string, check func([]string) error) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		dash, name := cmd.ArgsLenAtDash(), strings.ToUpper(noun)
		if len(args) == 0 || dash == 0 {
			return usageErrorf("%s needs a %s and a command: fence %s %s %s -- COMMAND [ARG...]", use, name, use, name, flags)
		}
		if err := check(args[:1]); err != nil {
			return err
		}
		switch {
		case len(args) == 1:
			return usageErrorf("%s needs a command after the %s: fence %s %s -- COMMAND [ARG...]", use, noun, use, args[0])
		case dash < 0:
			return usageErrorf("%s needs \"--\" before the command (so that its flags are not taken as fence's): fence %s %s %s -- %s", use, use, args[0], flags, strings.Join(args[1:], " "))
		}
		if err := check(args[:dash]); err != nil {
			return err
		}
		if dash == len(args) {
			return usageErrorf("%s needs a command after the %ss: fence %s %s -- COMMAND [ARG...]", use, noun, use, strings.Join(args[:dash], " "))
		}
		return nil
	}
}

func runRun(cmd *cobra.Command, f *Factory, o *runOptions, locks, command []string) error {
	wait, err := o.waitFor(cmd)
	if err != nil {
		return err
	}
	sig, err := supervise.ParseSignal(o.signal)
	if err != nil {
		return err
	}
	key, err := onceKey(cmd, f, o)
	if err != nil {
		return err
	}
	if err := checkRunFlags(o, key, locks); err != nil {
		return err
	}
	cfg, err := f.Config()
	if err != nil {
		return err
	}
	holder, err := f.holder(coord.DefaultHolder)
	if err != nil {
		return err
	}
	lock, set := "", slices.Clone(locks)
	if len(locks) == 1 {
		lock, set = locks[0], nil
	}
	// Before the coordinator is opened (see supervise.Runner); r.Close
	// ends the watchdog when the coordinator cannot be opened.
	r, err := supervise.Start(supervise.Options{
		Lock: lock, Locks: set, Command: command, Shell: o.shell,
		TTL: o.ttl, Holder: holder, Wait: wait,
		Deadline: o.deadline, Grace: o.grace, Signal: sig, NoRenew: o.noRenew,
		ConflictExitCode: o.conflictExitCode, MetricsFile: o.metricsFile,
		Once: key, OnceKeep: o.onceFor, DoneExitCode: o.doneExitCode, Slots: o.slots,
		Verbose: cfg.Verbose, Quiet: cfg.Quiet, LogFormat: cfg.LogFormat,
		Stdin: f.IO.In, Stdout: f.IO.Out, Stderr: f.IO.ErrOut,
		Location: location(cfg), Handover: handover(cfg),
		OnAcquired: f.peekVersions,
	})
	if err != nil {
		return exitcode.New(exitcode.Failure, err)
	}
	defer r.Close()
	// Signals are the Runner's business: it forwards them to the command.
	// The context must not end on SIGINT.
	ctx := context.WithoutCancel(cmd.Context())
	c, err := f.Coordinator(ctx)
	if err != nil {
		return err
	}
	code, err := exitcode.Failure, checkOrder(ctx, c, "run", locks, o.anyOrder) // only for a nested run
	if err == nil {
		code, err = r.Run(ctx, c)
	}
	f.flushVersions(nil) // when they came after the lease, or it was not acquired
	closeAfterRun(c, code)
	return commandExit(code, err, command, o.shell)
}

// checkRunFlags refuses the flags of fence run that conflict with each
// other or with the locks (key: the --once key, "" without).
func checkRunFlags(o *runOptions, key string, locks []string) error {
	if err := checkSlotsFlag(o.slots, len(locks)); err != nil {
		return err
	}
	switch {
	case o.slots > 1 && key != "":
		return usageErrorf("--slots %d and --once/--once-per conflict: a job run at most once needs no more than one holder", o.slots)
	case key != "" && len(locks) > 1:
		return usageErrorf("--once/--once-per take one lock, not %d (the completion record belongs to one lock): give one lock, or run the set inside a fence run of one lock with --once", len(locks))
	case o.deadline != 0 && o.deadline < MinDeadline:
		return usageErrorf("--deadline %v is below the minimum %v (the watchdog reads its clock every %v): give %v or more", o.deadline, MinDeadline, MinDeadline, MinDeadline)
	}
	return nil
}

// closeAfterRun closes the coordinator after fence run: after a stop of the
// command (76, 124) within a short budget (see supervise.AfterStop).
func closeAfterRun(c history.Recorder, code int) {
	if code != exitcode.LeaseLost && code != exitcode.Deadline {
		_ = c.Close()
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), supervise.AfterStop/3)
	defer cancel()
	_ = c.CloseContext(ctx)
}

// onceKey is the --once key of a run: --once KEY, or the period's start for
// --once-per ("" without either). The combinations that cannot keep the
// promise are refused.
func onceKey(cmd *cobra.Command, f *Factory, o *runOptions) (string, error) {
	fl := cmd.Flags()
	switch {
	case fl.Changed("once") && fl.Changed("once-per"):
		return "", usageErrorf("--once and --once-per conflict: give one")
	case !fl.Changed("once") && !fl.Changed("once-per"):
		for _, n := range []string{"once-for", "done-exit-code"} {
			if fl.Changed(n) {
				return "", usageErrorf("--%s needs --once KEY or --once-per D", n)
			}
		}
		return "", nil
	case fl.Changed("once"):
		if err := coord.ValidateKey(o.once); err != nil {
			return "", err
		}
		return o.once, nil
	}
	if o.oncePer < time.Second {
		return "", usageErrorf("--once-per %v is shorter than a second", o.oncePer)
	}
	if o.onceFor < o.oncePer {
		// The record would go before its period ends, and the job run again.
		return "", usageErrorf("--once-for %v is shorter than --once-per %v: the job would run again within its period", o.onceFor, o.oncePer)
	}
	return periodKey(f.Now(), o.oncePer), nil
}

// location is the coordinator's location for the command's environment, so
// that nested fence calls reach the same coordinator. Credentials are not
// passed on (supervise removes them).
func location(cfg *config.Config) map[string]string {
	var m map[string]string
	switch cfg.Backend() {
	case "local":
		return map[string]string{"FENCE_STATE_DIR": cfg.LocalStateDir()}
	case "postgres":
		m = map[string]string{"FENCE_POSTGRES": cfg.PostgresLocation(), "FENCE_POSTGRES_SCHEMA": cfg.PostgresSchema}
	default:
		m = map[string]string{"FENCE_ENDPOINTS": strings.Join(cfg.Endpoints, ","), "FENCE_PREFIX": cfg.Prefix}
		for k, v := range map[string]string{"FENCE_CACERT": cfg.CACert, "FENCE_CERT": cfg.Cert, "FENCE_KEY": cfg.Key, "FENCE_USER": cfg.User} {
			if v != "" {
				m[k] = v
			}
		}
	}
	if cfg.InsecureTransport {
		m["FENCE_INSECURE_TRANSPORT"] = "true"
	}
	return m
}

// periodKey is the key of `--once-per period` at t: the start of the period
// that contains t, in UTC, periods aligned to the Unix epoch, written in RFC
// 3339 ("2025-03-01T00:00:00Z"; fractions of a second only when the period
// has them). period must be positive.
func periodKey(t time.Time, period time.Duration) string {
	ns := t.UnixNano()
	p := int64(period)
	start := ns - ns%p
	if ns%p < 0 {
		start -= p // before the epoch: floor, not truncation
	}
	return time.Unix(0, start).UTC().Format(time.RFC3339Nano)
}
