package format

import (
	"testing"
	"time"

	"github.com/charmbracelet/x/ansi"
)

func TestDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		-time.Second:                     "0s",
		0:                                "0s",
		999 * time.Millisecond:           "0s",
		7 * time.Second:                  "7s",
		59 * time.Second:                 "59s",
		4*time.Minute + 5*time.Second:    "4m05s",
		3*time.Hour + 7*time.Minute:      "3h07m",
		2*24*time.Hour + 4*time.Hour:     "2d04h",
		12 * 24 * time.Hour:              "12d",
		27 * 365 * 24 * time.Hour:        "9855d",
		time.Duration(1<<63 - 1):         "106751d",
		9*time.Hour + 59*time.Minute + 1: "9h59m",
	} {
		if got := Duration(d); got != want {
			t.Errorf("Duration(%v) = %q, want %q", d, got, want)
		}
	}
}

func TestCeil(t *testing.T) {
	for d, want := range map[time.Duration]time.Duration{
		-1: 0, 0: 0, 1: time.Second, 300 * time.Millisecond: time.Second,
		time.Second: time.Second, time.Second + 1: 2 * time.Second,
	} {
		if got := Ceil(d); got != want {
			t.Errorf("Ceil(%v) = %v, want %v", d, got, want)
		}
	}
}

func TestLatency(t *testing.T) {
	for d, want := range map[time.Duration]string{
		-1:                      "0.0ms",
		400 * time.Microsecond:  "0.4ms",
		12 * time.Millisecond:   "12ms",
		1300 * time.Millisecond: "1.3s",
	} {
		if got := Latency(d); got != want {
			t.Errorf("Latency(%v) = %q, want %q", d, got, want)
		}
	}
}

func TestFit(t *testing.T) {
	cases := []struct {
		s           string
		w           int
		left, right string
	}{
		{"abc", 5, "abc  ", "  abc"},
		{"abcdef", 4, "abc…", "abc…"},
		{"abcd", 4, "abcd", "abcd"},
		{"世界世界", 5, "世界…", "世界…"}, // wide characters count twice
		{"x", 0, "", ""},
	}
	for _, c := range cases {
		if got := Fit(c.s, c.w); got != c.left || ansi.StringWidth(got) != c.w {
			t.Errorf("Fit(%q, %d) = %q", c.s, c.w, got)
		}
		if got := FitRight(c.s, c.w); got != c.right {
			t.Errorf("FitRight(%q, %d) = %q", c.s, c.w, got)
		}
	}
}

func TestBar(t *testing.T) {
	s := time.Second
	for _, c := range []struct {
		left, total time.Duration
		w, want     int
	}{
		{15 * s, 15 * s, 10, 10},
		{20 * s, 15 * s, 10, 10},
		{0, 15 * s, 10, 0},
		{-s, 15 * s, 10, 0},
		{time.Millisecond, 15 * s, 10, 1}, // about to expire, still visible
		{7500 * time.Millisecond, 15 * s, 10, 5},
		{s, 0, 10, 0},
	} {
		if got := BarCells(c.left, c.total, c.w); got != c.want {
			t.Errorf("BarCells(%v, %v, %d) = %d, want %d", c.left, c.total, c.w, got, c.want)
		}
		full, empty := Bar(c.left, c.total, c.w)
		if ansi.StringWidth(full+empty) != c.w {
			t.Errorf("Bar(%v, %v, %d) is %q%q", c.left, c.total, c.w, full, empty)
		}
	}
}

// TestBlock: exactly h lines, none wider than w.
func TestBlock(t *testing.T) {
	for _, c := range []struct {
		s    string
		w, h int
		want string
	}{
		{"ab\ncd", 5, 3, "ab\ncd\n"},
		{"abcdef\nx\ny", 4, 2, "abc…\nx"},
		{"a", 3, 0, ""},
	} {
		if got := Block(c.s, c.w, c.h); got != c.want {
			t.Errorf("Block(%q, %d, %d) = %q, want %q", c.s, c.w, c.h, got, c.want)
		}
	}
}
