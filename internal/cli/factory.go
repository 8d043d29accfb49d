package cli

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/mattn/go-isatty"
	"github.com/spf13/pflag"

	"github.com/fence-dev/fence/internal/config"
	"github.com/fence-dev/fence/internal/history/auto"
	"github.com/fence-dev/fence/internal/logging"
	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/coord/etcd"
	"github.com/fence-dev/fence/pkg/history"
)

// IOStreams are a command's standard streams.
type IOStreams struct {
	In     io.Reader
	Out    io.Writer
	ErrOut io.Writer

	outTTY bool
}

// System returns the process's standard streams; Out is a terminal when
// stdout is one.
func System() *IOStreams {
	fd := os.Stdout.Fd()
	return &IOStreams{
		In:     os.Stdin,
		Out:    os.Stdout,
		ErrOut: os.Stderr,
		outTTY: isatty.IsTerminal(fd) || isatty.IsCygwinTerminal(fd),
	}
}

// Test returns streams writing to the given writers, with stdin empty and
// stdout not a terminal.
func Test(out, errOut io.Writer) *IOStreams {
	return &IOStreams{In: eofReader{}, Out: out, ErrOut: errOut}
}

type eofReader struct{}

func (eofReader) Read([]byte) (int, error) { return 0, io.EOF }

// IsStdoutTTY reports whether Out is a terminal (tables are then aligned and
// headed, --watch redraws the screen).
func (s *IOStreams) IsStdoutTTY() bool { return s.outTTY }

// SetStdoutTTY overrides terminal detection (tests).
func (s *IOStreams) SetStdoutTTY(tty bool) { s.outTTY = tty }

// Factory gives commands what they need from the outside world, so that they
// can be tested: the streams, the configuration, the coordinator and a clock.
type Factory struct {
	IO *IOStreams
	// Config returns the resolved configuration (flags, env, file, defaults).
	Config func() (*config.Config, error)
	// Coordinator opens the configured coordinator; the caller closes it.
	Coordinator func(ctx context.Context) (coord.Coordinator, error)
	// Now reads the wall clock (for "held for").
	Now func() time.Time
	// Logger is the structured log on stderr (--log-format, --log-level).
	Logger func() (*slog.Logger, error)

	flags *pflag.FlagSet // the root's persistent flags, set by NewRootCmd
	args  []string       // the command line, set by Run (for hints in flag errors)

	versionsOnce sync.Once
	versions     []etcd.MemberVersion // what the etcd members reported, once answered
	versionWarn  string               // their known lease-safety bugs, one line

	// The members' versions are asked on the side when an etcd coordinator
	// opens (askedAt), never on the way of a lock operation; versionsDone
	// is closed once they are answered (or the question's bound passed).
	// flushVersions prints the warnings once they are in.
	askedAt      time.Time
	versionsDone chan struct{}
	// askVersions asks the members (etcd.Coordinator.ServerVersions; a
	// test holds the answer back).
	askVersions func(context.Context, *etcd.Coordinator) []etcd.MemberVersion
	flushMu     sync.Mutex
	flushed     bool
}

// NewFactory returns a Factory whose configuration comes from the root
// command's flags (see NewRootCmd) and whose coordinator is opened with
// config.Open.
func NewFactory(ios *IOStreams) *Factory {
	f := &Factory{IO: ios, Now: time.Now}
	var (
		once sync.Once
		cfg  *config.Config
		err  error
	)
	f.Config = func() (*config.Config, error) {
		once.Do(func() {
			if f.flags == nil {
				err = fmt.Errorf("internal error: configuration read before the flags were defined")
				return
			}
			cfg, err = config.Load(f.flags)
		})
		return cfg, err
	}
	f.Logger = func() (*slog.Logger, error) {
		cfg, err := f.Config()
		if err != nil {
			return nil, err
		}
		return logging.New(f.IO.ErrOut, cfg.LogFormat, cfg.LogLevel)
	}
	f.Coordinator = func(ctx context.Context) (coord.Coordinator, error) {
		cfg, err := f.Config()
		if err != nil {
			return nil, err
		}
		logger, err := f.Logger()
		if err != nil {
			return nil, err
		}
		inner, err := config.Open(ctx, cfg)
		if err != nil {
			return nil, err
		}
		if ec, ok := inner.(*etcd.Coordinator); ok {
			f.askVersionsOf(ctx, ec, cfg.DialTimeout)
		}
		// Every command records its lease events in the lock's history.
		opts := []history.Option{history.WithLogger(logger)}
		if dir := spoolDir(cfg); dir != "" {
			if _, ok := inner.(*etcd.Coordinator); ok {
				opts = append(opts, history.WithSpool(dir))
			}
		}
		c, err := auto.Wrap(inner, opts...)
		if err != nil {
			if withoutHistory(cfg) {
				f.verbosef("coordinator: %s (lease events are not recorded: no history store on PostgreSQL in this build)", inner.Describe())
				return inner, nil
			}
			inner.Close()
			return nil, err
		}
		f.verbosef("coordinator: %s", c.Describe())
		// The events a fence on this host could not write (the coordinator
		// did not answer) go first, now that it answers.
		if n, err := c.FlushSpool(ctx); err != nil {
			f.verbosef("history: kept events not written yet: %v", err)
		} else if n > 0 {
			f.verbosef("history: wrote %d events kept on this host", n)
		}
		return c, nil
	}
	return f
}

// withoutHistory reports whether cfg's coordinator is used without a
// history when auto.Wrap finds no store for it: PostgreSQL, until its
// history store is chosen there (auto.Store, the one switch by backend).
func withoutHistory(cfg *config.Config) bool { return cfg.Backend() == "postgres" }

// spoolDir is where the history events of cfg's etcd coordinator that
// could not be written are kept on this host: one directory per cluster
// and prefix in the user's state directory ("" when there is none).
func spoolDir(cfg *config.Config) string {
	state := cfg.LocalStateDir()
	if state == "" {
		return ""
	}
	eps := slices.Clone(cfg.Endpoints)
	slices.Sort(eps)
	sum := sha256.Sum256([]byte(cfg.Prefix + "\n" + strings.Join(eps, ",")))
	return filepath.Join(state, "history-spool-"+hex.EncodeToString(sum[:6]))
}

// The etcd members' versions are asked for their known lease-safety bugs,
// once per process, on the side: a member that does not answer (stalled or
// partitioned while the quorum lives) must not hold up the command's work,
// as the question did for its whole bound (a second) on every command
// before. The warnings are printed once the answer is in: fence run looks
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

// askVersionsOf asks c's members for their versions on a goroutine, once
// per process; versionsDone is closed with the answer.
func (f *Factory) askVersionsOf(ctx context.Context, c *etcd.Coordinator, dial time.Duration) {
	f.versionsOnce.Do(func() {
		done := make(chan struct{})
		f.askedAt, f.versionsDone = time.Now(), done
		go func() {
			defer close(done)
			vctx, cancel := context.WithTimeout(ctx, min(versionTimeout, max(dial, 100*time.Millisecond)))
			defer cancel()
			var vs []etcd.MemberVersion
			if f.askVersions != nil {
				vs = f.askVersions(vctx, c)
			} else {
				vs = c.ServerVersions(vctx)
			}
			f.versions, f.versionWarn = vs, etcd.VersionWarning(vs)
		}()
	})
}

// awaitVersions waits for the whole answer of the version question (at
// most its bound), when one was asked: for fence config and the dashboard,
// which show the versions.
func (f *Factory) awaitVersions() {
	if f.versionsDone != nil {
		<-f.versionsDone
	}
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
	if !f.versionsIn(wait) {
		return
	}
	f.flushMu.Lock()
	defer f.flushMu.Unlock()
	if f.flushed {
		return
	}
	f.flushed = true
	if f.versionWarn == "" {
		return
	}
	if w == nil {
		w = f.IO.ErrOut
	}
	// A warning like every other (--log-level error hides it), never under
	// -q, and at most once a day per host and versions (cron mails every
	// line): fence config, status, show, top and the exporter show it
	// always.
	cfg, err := f.Config()
	if err != nil || cfg.Quiet {
		return
	}
	if lvl, err := logging.ParseLevel(cfg.LogLevel); err == nil && lvl > slog.LevelWarn {
		return
	}
	if daily && !warnDue(f.versionWarn, f.Now()) {
		return
	}
	f.logLineTo(w, slog.LevelWarn, f.versionWarn)
}

// versionsIn reports whether the answer of the version question is in;
// with wait, it waits for it until warnWait after the question began.
func (f *Factory) versionsIn(wait bool) bool {
	done := f.versionsDone
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
	t := time.NewTimer(time.Until(f.askedAt.Add(warnWait)))
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	}
}

// coordinatorWarning is fence status's and show's coordinator_warning:
// the etcd members' known lease-safety bugs (versionWarning), when their
// versions are in by warnWait after the question began ("" otherwise, and
// when there are none).
func (f *Factory) coordinatorWarning() string {
	if !f.versionsIn(true) {
		return ""
	}
	return f.versionWarning()
}

// versionWarning is the dashboard's short form of the version warnings,
// the bug first so that a narrow status line keeps it: "lease bug
// etcd#15247 in etcd 3.4.23" ("" when none).
func (f *Factory) versionWarning() string {
	seen := map[string]bool{}
	var parts []string
	for _, v := range f.versions {
		for _, b := range etcd.BugsOf(v.Version) {
			if k := v.Version + b.Issue; !seen[k] {
				seen[k] = true
				parts = append(parts, "lease bug "+b.Issue+" in etcd "+v.Version)
			}
		}
	}
	return strings.Join(parts, "; ")
}

// holder returns the configured holder identity or the default.
func (f *Factory) holder() (string, error) {
	return f.holderOr(coord.DefaultHolder)
}

// holderOr is --holder, else def().
func (f *Factory) holderOr(def func() string) (string, error) {
	cfg, err := f.Config()
	if err != nil {
		return "", err
	}
	if cfg.Holder != "" {
		// Checked here, before anything starts, as every backend would.
		if err := coord.ValidateHolder(cfg.Holder); err != nil {
			return "", fmt.Errorf("--holder: %w", err)
		}
		return cfg.Holder, nil
	}
	return def(), nil
}

// parentHolder is HOSTNAME:PPID: fence acquire's default holder. The lease
// outlives fence acquire, which exits at once; the process that holds it is
// the one that ran fence acquire (the script), so that is the PID to name.
func parentHolder() string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		h = "localhost"
	}
	return fmt.Sprintf("%s:%d", h, os.Getppid())
}

// verbosef prints a progress message on stderr when --verbose is on.
func (f *Factory) verbosef(format string, args ...any) {
	if cfg, err := f.Config(); err == nil && cfg.Verbose {
		f.logLine(slog.LevelInfo, fmt.Sprintf(format, args...))
	}
}

// warnf prints a warning on stderr.
func (f *Factory) warnf(format string, args ...any) {
	f.logLine(slog.LevelWarn, fmt.Sprintf(format, args...))
}

// logLine prints one line of fence's own on stderr in --log-format's style
// (text: "fence: msg", "fence: warning: msg"), whatever --log-level says:
// a warning or an error is never filtered out. Text when the configuration
// cannot be read.
func (f *Factory) logLine(level slog.Level, msg string, attrs ...any) {
	f.logLineTo(f.IO.ErrOut, level, msg, attrs...)
}

// logLineTo is logLine on w.
func (f *Factory) logLineTo(w io.Writer, level slog.Level, msg string, attrs ...any) {
	format := "text"
	if cfg, err := f.Config(); err == nil {
		format = cfg.LogFormat
	}
	log, err := logging.New(w, format, "debug")
	if err != nil {
		log, _ = logging.New(w, "text", "debug")
	}
	log.Log(context.Background(), level, msg, attrs...)
}

// withCoordinator opens the coordinator, calls fn and closes it.
func (f *Factory) withCoordinator(ctx context.Context, fn func(coord.Coordinator) error) error {
	c, err := f.Coordinator(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	defer f.flushVersions(nil) // before the close, which ends the question
	return fn(c)
}
