// Package format turns lock facts into the short strings the dashboard shows:
// compact durations, fixed-width cells, TTL bars.
package format

import (
	"fmt"
	"strings"
	"time"

	"github.com/charmbracelet/x/ansi"
)

// Duration is a compact duration for a narrow column, at most five cells
// up to 27 years: "7s", "4m05s", "3h07m", "2d04h", "12d". Negative
// durations show as "0s". Fractions of a second are dropped (use Ceil first
// for a time left).
func Duration(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	s := int64(d / time.Second)
	switch {
	case s < 60:
		return fmt.Sprintf("%ds", s)
	case s < 3600:
		return fmt.Sprintf("%dm%02ds", s/60, s%60)
	case s < 86400:
		return fmt.Sprintf("%dh%02dm", s/3600, s%3600/60)
	case s < 10*86400:
		return fmt.Sprintf("%dd%02dh", s/86400, s%86400/3600)
	default:
		return fmt.Sprintf("%dd", s/86400)
	}
}

// Ceil rounds d up to a whole second, so that a lease with 300ms left shows
// "1s" and only a lease that has run out shows "0s".
func Ceil(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return (d + time.Second - 1).Truncate(time.Second)
}

// Latency is a read latency: "0.4ms", "12ms", "1.3s".
func Latency(d time.Duration) string {
	switch {
	case d < 0:
		d = 0
		fallthrough
	case d < 10*time.Millisecond:
		return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond))
	case d < time.Second:
		return fmt.Sprintf("%dms", d/time.Millisecond)
	default:
		return fmt.Sprintf("%.1fs", d.Seconds())
	}
}

// Fit truncates s to w cells (ending in "…" when cut) and pads it with
// spaces to exactly w cells. Wide characters count as two cells.
func Fit(s string, w int) string { return fit(s, w, false) }

// FitRight is Fit aligned to the right.
func FitRight(s string, w int) string { return fit(s, w, true) }

func fit(s string, w int, right bool) string {
	if w <= 0 {
		return ""
	}
	if ansi.StringWidth(s) > w {
		s = ansi.Truncate(s, w, "…")
	}
	pad := strings.Repeat(" ", max(w-ansi.StringWidth(s), 0))
	if right {
		return pad + s
	}
	return s + pad
}

// Block is s cut or padded to exactly h lines, each cut to w cells (ending
// in "…" when cut).
func Block(s string, w, h int) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		if ansi.StringWidth(l) > w {
			lines[i] = ansi.Truncate(l, w, "…")
		}
	}
	for len(lines) < h {
		lines = append(lines, "")
	}
	return strings.Join(lines[:h], "\n")
}

// BarCells is how many of width cells a bar filled to left/total has: at
// least one while left > 0, so a lease about to expire is still visible.
func BarCells(left, total time.Duration, width int) int {
	if width <= 0 || total <= 0 || left <= 0 {
		return 0
	}
	if left >= total {
		return width
	}
	n := int(int64(width) * int64(left) / int64(total))
	if n == 0 {
		n = 1
	}
	return n
}

// Bar draws a TTL bar of width cells, without style: its filled and its
// empty cells.
func Bar(left, total time.Duration, width int) (filled, empty string) {
	n := BarCells(left, total, width)
	return strings.Repeat("█", n), strings.Repeat("░", width-n)
}
