package logging

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/fence-dev/fence/pkg/coord"
)

func TestFormats(t *testing.T) {
	for _, tc := range []struct {
		format string
		check  func(t *testing.T, out string)
	}{
		{"text", func(t *testing.T, out string) {
			if out != `fence: acquired lock=jobs/a token=7` {
				t.Errorf("text output %q", out)
			}
		}},
		{"", func(t *testing.T, out string) {
			if out != `fence: acquired lock=jobs/a token=7` {
				t.Errorf("default output %q", out)
			}
		}},
		{"JSON", func(t *testing.T, out string) {
			var m map[string]any
			if err := json.Unmarshal([]byte(out), &m); err != nil {
				t.Fatalf("json output %q: %v", out, err)
			}
			if m["level"] != "INFO" || m["msg"] != "acquired" || m["lock"] != "jobs/a" || m["token"] != 7.0 || m["time"] == nil {
				t.Errorf("json output %v", m)
			}
		}},
	} {
		var buf bytes.Buffer
		l, err := New(&buf, tc.format, "info")
		if err != nil {
			t.Fatal(err)
		}
		l.Info("acquired", "lock", "jobs/a", "token", 7)
		l.Debug("hidden")
		if strings.Count(buf.String(), "\n") != 1 {
			t.Errorf("%q: want one line, got %q", tc.format, buf.String())
		}
		tc.check(t, strings.TrimSpace(buf.String()))
	}
}

func TestLevels(t *testing.T) {
	for in, want := range map[string]slog.Level{
		"": slog.LevelInfo, "debug": slog.LevelDebug, "INFO": slog.LevelInfo, " Warn ": slog.LevelWarn,
		"warning": slog.LevelWarn, "WARNING+1": slog.LevelWarn + 1, "error": slog.LevelError, "debug-4": slog.LevelDebug - 4,
	} {
		got, err := ParseLevel(in)
		if err != nil || got != want {
			t.Errorf("ParseLevel(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	var buf bytes.Buffer
	l, err := New(&buf, "text", "warn")
	if err != nil {
		t.Fatal(err)
	}
	l.Info("no")
	l.Warn("yes")
	l.Error("also")
	if out := buf.String(); out != "fence: warning: yes\nfence: error: also\n" {
		t.Errorf("warn level output %q", out)
	}
}

// TestTextIsFenceStyle: the text format is the style of fence's own
// messages ("fence: warning: ..."), never slog's time=... level=WARN, so a
// run's warnings from the history recorder and from fence run read alike;
// values are quoted, attributes and groups of derived loggers kept.
func TestTextIsFenceStyle(t *testing.T) {
	var buf bytes.Buffer
	l, err := New(&buf, "text", "debug")
	if err != nil {
		t.Fatal(err)
	}
	l.Warn("history: events could not be recorded", "events", 2, "err", errors.New("disk full: no space"))
	l.With("lock", "jobs/a").WithGroup("g").Debug("multi\nline", "k", "v")
	want := "fence: warning: history: events could not be recorded events=2 err=\"disk full: no space\"\n" +
		"fence: debug: multi line lock=jobs/a g.k=v\n"
	if got := buf.String(); got != want {
		t.Errorf("got %q\nwant %q", got, want)
	}
	if strings.Contains(buf.String(), "level=") || strings.Contains(buf.String(), "time=") {
		t.Errorf("slog's text format leaked: %q", buf.String())
	}
}

func TestInvalid(t *testing.T) {
	for _, tc := range []struct{ format, level, want string }{
		{"xml", "info", `log format "xml": want one of text, json`},
		{"text", "loud", `log level "loud": want one of debug, info, warn, error`},
		{"text", "info+", `log level "info+"`},
		{"json", "\x00", `log level "\x00"`},
	} {
		l, err := New(&bytes.Buffer{}, tc.format, tc.level)
		if l != nil || !errors.Is(err, coord.ErrInvalid) || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("New(%q, %q) = %v, %v; want ErrInvalid with %q", tc.format, tc.level, l, err, tc.want)
		}
	}
}

func TestDiscard(t *testing.T) {
	l := Discard()
	l.Error("nothing happens")
	if l.Enabled(context.Background(), slog.LevelError) {
		t.Error("Discard logs")
	}
}
