package cli

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/fence-dev/fence/pkg/history"

	"github.com/fence-dev/fence/internal/output"
)

// Wait time beside hold time (fence show): the seed's FM5, "measure lock
// wait time separately from hold time; if wait dominates, the lock is the
// bottleneck". Both come from the lock's history: the waited of acquired
// events and the held-for of released ones.

// contentionView sums up the waits and holds of the events shown.
type contentionView struct {
	Wait durationsView `json:"wait" yaml:"wait"`
	Hold durationsView `json:"hold" yaml:"hold"`
}

// durationsView sums up durations, in seconds (null when there are none).
type durationsView struct {
	Count          int       `json:"count" yaml:"count"`
	MedianSeconds  *float64  `json:"median_seconds" yaml:"median_seconds"`
	MaxSeconds     *float64  `json:"max_seconds" yaml:"max_seconds"`
	TotalSeconds   float64   `json:"total_seconds" yaml:"total_seconds"`
	RecentSeconds  []float64 `json:"recent_seconds" yaml:"recent_seconds"` // oldest first
	recent         []time.Duration
	median, maxDur time.Duration
}

// maxRecent is how many waits and holds the sparklines show.
const maxRecent = 20

func newDurationsView(ds []time.Duration) durationsView {
	v := durationsView{Count: len(ds), RecentSeconds: []float64{}}
	if len(ds) == 0 {
		return v
	}
	sorted := slices.Clone(ds)
	slices.Sort(sorted)
	v.median, v.maxDur = sorted[len(sorted)/2], sorted[len(sorted)-1]
	v.MedianSeconds, v.MaxSeconds = ptr(output.Seconds(v.median)), ptr(output.Seconds(v.maxDur))
	var total time.Duration
	for _, d := range ds {
		total += d
	}
	v.TotalSeconds = output.Seconds(total)
	v.recent = ds[max(0, len(ds)-maxRecent):]
	for _, d := range v.recent {
		v.RecentSeconds = append(v.RecentSeconds, output.Seconds(d))
	}
	return v
}

func newContention(events []history.Event) contentionView {
	var waits, holds []time.Duration
	for _, e := range events {
		switch e.Kind {
		case history.Acquired:
			waits = append(waits, max(e.Wait, 0))
		case history.Released:
			holds = append(holds, max(e.HeldFor, 0))
		}
	}
	return contentionView{Wait: newDurationsView(waits), Hold: newDurationsView(holds)}
}

// sparks are the levels of a sparkline, lowest first.
var sparks = []rune("▁▂▃▄▅▆▇█")

// sparkline draws ds on one scale, top, so that a row of waits and one of
// holds compare at a glance.
func sparkline(ds []time.Duration, top time.Duration) string {
	var b strings.Builder
	for _, d := range ds {
		i := 0
		if top > 0 {
			i = int(float64(d) / float64(top) * float64(len(sparks)-1))
		}
		b.WriteRune(sparks[min(max(i, 0), len(sparks)-1)])
	}
	return b.String()
}

// contentionLines is the text form: waits and holds side by side, with
// sparklines of the recent ones on one scale, and what they mean.
func contentionLines(c contentionView) []string {
	if c.Wait.Count == 0 && c.Hold.Count == 0 {
		return nil
	}
	top := max(c.Wait.maxDur, c.Hold.maxDur)
	row := func(name string, v durationsView) string {
		if v.Count == 0 {
			return fmt.Sprintf("%-5s none", name)
		}
		return fmt.Sprintf("%-5s n=%-3d median %-8s max %-8s total %-8s %s", name, v.Count,
			output.Duration(v.median), output.Duration(v.maxDur), output.Duration(time.Duration(v.TotalSeconds*float64(time.Second))),
			sparkline(v.recent, top))
	}
	lines := []string{row("wait", c.Wait), row("hold", c.Hold)}
	if c.Wait.Count > 0 && c.Hold.Count > 0 && c.Wait.TotalSeconds > c.Hold.TotalSeconds {
		lines = append(lines, "waits exceed holds: the lock is the bottleneck")
	}
	return lines
}
