// Package logging builds fence's structured logger (log/slog) from the
// --log-format and --log-level flags.
//
//	logger, err := logging.New(os.Stderr, "json", "debug")
//
// Text is fence's own line style, the one of its messages and warnings:
// "fence: warning: MSG key=value ..." (values quoted as slog's text format
// quotes them; "fence: MSG" at info, "fence: debug: ", "fence: error: "),
// so that one run never mixes two styles on stderr. JSON is slog's, one
// object per line carrying time, level and msg first. Levels: see
// ParseLevel.
package logging

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"

	"github.com/fence-dev/fence/pkg/coord"
)

// Formats and levels accepted by New, for flag help and completion.
var (
	Formats = []string{"text", "json"}
	Levels  = []string{"debug", "info", "warn", "error"}
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
		return slog.New(newLineHandler(w, opts)), nil
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

// lineHandler writes a record as one line in fence's style: "fence: ",
// the level (nothing for info), the message, and the attributes as slog's
// text handler writes them (key=value, quoted where needed, groups as
// dotted keys). The text handler formats the attributes into a buffer that
// the handler and its derivatives (WithAttrs, WithGroup) share under one
// mutex.
type lineHandler struct {
	mu    *sync.Mutex
	w     io.Writer
	buf   *bytes.Buffer
	inner slog.Handler
}

func newLineHandler(w io.Writer, opts *slog.HandlerOptions) *lineHandler {
	buf := new(bytes.Buffer)
	inner := slog.NewTextHandler(buf, &slog.HandlerOptions{
		Level: opts.Level,
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if len(groups) == 0 && (a.Key == slog.TimeKey || a.Key == slog.LevelKey || a.Key == slog.MessageKey) {
				return slog.Attr{}
			}
			return a
		},
	})
	return &lineHandler{mu: new(sync.Mutex), w: w, buf: buf, inner: inner}
}

func (h *lineHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.inner.Enabled(ctx, l)
}

func (h *lineHandler) Handle(ctx context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.buf.Reset()
	if err := h.inner.Handle(ctx, r); err != nil {
		return err
	}
	var line strings.Builder
	line.WriteString("fence: ")
	switch {
	case r.Level >= slog.LevelError:
		line.WriteString("error: ")
	case r.Level >= slog.LevelWarn:
		line.WriteString("warning: ")
	case r.Level < slog.LevelInfo:
		line.WriteString("debug: ")
	}
	line.WriteString(strings.Join(strings.Fields(r.Message), " "))
	if attrs := strings.TrimSpace(h.buf.String()); attrs != "" {
		line.WriteString(" ")
		line.WriteString(attrs)
	}
	line.WriteString("\n")
	_, err := io.WriteString(h.w, line.String())
	return err
}

func (h *lineHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &lineHandler{mu: h.mu, w: h.w, buf: h.buf, inner: h.inner.WithAttrs(as)}
}

func (h *lineHandler) WithGroup(name string) slog.Handler {
	return &lineHandler{mu: h.mu, w: h.w, buf: h.buf, inner: h.inner.WithGroup(name)}
}
