// Package logging builds fence's structured logger (log/slog) from the
// --log-format and --log-level flags.
//
//	logger, err := logging.New(os.Stderr, "json", "debug")
//
// Text is slog's key=value format, JSON one object per line; both carry
// time, level and msg first. Levels are debug, info, warn (or warning) and
// error, in any case, optionally with an offset as slog allows ("info+2").
package logging

import (
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/fence-dev/fence/pkg/coord"
)

// Formats and levels accepted by New, for flag help and completion.
var (
	Formats = []string{"text", "json"}
	Levels  = []string{"debug", "info", "warn", "error"}
)

// DefaultFormat and DefaultLevel apply when the flags are empty.
const (
	DefaultFormat = "text"
	DefaultLevel  = "info"
)

// New returns a logger writing to w in format ("text" or "json"; "" means
// text) at level and above ("" means info). An unknown format or level is
// an error wrapping coord.ErrInvalid that names the accepted values.
func New(w io.Writer, format, level string) (*slog.Logger, error) {
	lvl, err := ParseLevel(level)
	if err != nil {
		return nil, err
	}
	opts := &slog.HandlerOptions{Level: lvl}
	switch strings.ToLower(strings.TrimSpace(format)) {
	case "", "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("%w: log format %q: want one of %s", coord.ErrInvalid, format, strings.Join(Formats, ", "))
}

// ParseLevel reads a level name: debug, info, warn, warning or error (any
// case, "" is info), with an optional offset ("debug-4", "info+2").
func ParseLevel(s string) (slog.Level, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	if t == "" {
		return slog.LevelInfo, nil
	}
	if rest, ok := strings.CutPrefix(t, "warning"); ok {
		t = "warn" + rest
	}
	var l slog.Level
	if err := l.UnmarshalText([]byte(t)); err != nil {
		return 0, fmt.Errorf("%w: log level %q: want one of %s", coord.ErrInvalid, s, strings.Join(Levels, ", "))
	}
	return l, nil
}

// Discard returns a logger that writes nothing, for library callers and
// tests that want no logs.
func Discard() *slog.Logger { return slog.New(slog.DiscardHandler) }
