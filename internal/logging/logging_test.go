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
			if !strings.Contains(out, "level=INFO") || !strings.Contains(out, `msg=acquired lock=jobs/a token=7`) {
				t.Errorf("text output %q", out)
			}
		}},
		{"", func(t *testing.T, out string) {
			if !strings.Contains(out, "level=INFO msg=acquired") {
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
	if out := buf.String(); strings.Contains(out, "msg=no") || !strings.Contains(out, "msg=yes") || !strings.Contains(out, "msg=also") {
		t.Errorf("warn level output %q", out)
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
