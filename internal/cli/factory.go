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
	return &IOStreams{In: strings.NewReader(""), Out: out, ErrOut: errOut}
}

// IsStdoutTTY reports whether Out is a terminal (tables are then aligned and
// headed, --watch redraws the screen).
func (s *IOStreams) IsStdoutTTY() bool { return s.outTTY }

// Factory gives commands what they need from the outside world, so that they
// can be tested: the streams, the configuration, the coordinator and a clock.
type Factory struct {
	IO *IOStreams
	// Config returns the resolved configuration (flags, env, file, defaults).
	Config func() (*config.Config, error)
	// Now reads the wall clock (for "held for").
	Now func() time.Time

	flags *pflag.FlagSet // the root's persistent flags, set by NewRootCmd
	args  []string       // the command line, set by Run (for hints in flag errors)

	// versions is the question of the etcd members' versions, asked on
	// the side when an etcd coordinator opens (versions.go).
	versions versionQuestion
}

// NewFactory returns a Factory whose configuration comes from the root
// command's flags (see NewRootCmd) and whose coordinator is opened with
// config.Open.
func NewFactory(ios *IOStreams) *Factory {
	f := &Factory{IO: ios, Now: time.Now}
	f.Config = sync.OnceValues(func() (*config.Config, error) {
		if f.flags == nil {
			return nil, fmt.Errorf("internal error: configuration read before the flags were defined")
		}
		return config.Load(f.flags)
	})
	return f
}

// Logger is the structured log on stderr (--log-format, --log-level).
func (f *Factory) Logger() (*slog.Logger, error) {
	cfg, err := f.Config()
	if err != nil {
		return nil, err
	}
	return logging.New(f.IO.ErrOut, cfg.LogFormat, cfg.LogLevel)
}

// Coordinator opens the configured coordinator; the caller closes it.
func (f *Factory) Coordinator(ctx context.Context) (history.Recorder, error) {
	cfg, err := f.Config()
	if err != nil {
		return nil, err
	}
	logger, err := f.Logger()
	if err != nil {
		return nil, err
	}
	// Every command records its lease events in the lock's history.
	c, err := openRecorded(ctx, cfg, logger)
	if err != nil {
		return nil, err
	}
	f.versions.ask(ctx, auto.Backend(c), cfg.DialTimeout)
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

// openRecorded opens cfg's coordinator with a history.Recorder: the lease
// events are recorded in each lock's history, and those that cannot be
// written are kept in the host's spool (spoolDir).
func openRecorded(ctx context.Context, cfg *config.Config, logger *slog.Logger) (history.Recorder, error) {
	inner, err := config.Open(ctx, cfg)
	if err != nil {
		return nil, err
	}
	opts := []history.Option{history.WithLogger(logger)}
	if dir := spoolDir(cfg); dir != "" {
		opts = append(opts, history.WithSpool(dir))
	}
	c, err := auto.Wrap(inner, opts...)
	if err != nil {
		inner.Close()
		return nil, err
	}
	return c, nil
}

// spoolDir is where the history events of cfg's coordinator that could not
// be written are kept on this host: one directory per etcd cluster and
// prefix, or PostgreSQL database and schema, in the user's state directory
// ("" for the local coordinator, whose history is on this host already, or
// when there is no state directory).
func spoolDir(cfg *config.Config) string {
	state := cfg.LocalStateDir()
	if state == "" || cfg.Backend() == "local" {
		return ""
	}
	eps := slices.Clone(cfg.Endpoints)
	slices.Sort(eps)
	where := cfg.Prefix + "\n" + strings.Join(eps, ",")
	if cfg.Backend() == "postgres" {
		where = "postgres\n" + cfg.PostgresLocation() + "\n" + cfg.PostgresSchema
	}
	sum := sha256.Sum256([]byte(where))
	return filepath.Join(state, "history-spool-"+hex.EncodeToString(sum[:6]))
}

// holder is --holder, else def() (coord.DefaultHolder but for acquire).
func (f *Factory) holder(def func() string) (string, error) {
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
func (f *Factory) withCoordinator(ctx context.Context, fn func(history.Recorder) error) error {
	c, err := f.Coordinator(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	defer f.flushVersions(nil) // before the close, which ends the question
	return fn(c)
}
