package cli

import (
	"fmt"

	"github.com/fence-dev/fence/internal/contention"
	"github.com/fence-dev/fence/internal/output"
)

// Wait time beside hold time (fence show), summed up by package contention
// (which the dashboard's details draw too) from the lock's history: the
// waited of acquired events and the held-for of released ones.

// contentionView sums up the waits and holds of the events shown.
type contentionView struct {
	Wait durationsView `json:"wait" yaml:"wait"`
	Hold durationsView `json:"hold" yaml:"hold"`
}

// durationsView sums up durations, in seconds (null when there are none).
type durationsView struct {
	Count         int       `json:"count" yaml:"count"`
	MedianSeconds *float64  `json:"median_seconds" yaml:"median_seconds"`
	MaxSeconds    *float64  `json:"max_seconds" yaml:"max_seconds"`
	TotalSeconds  float64   `json:"total_seconds" yaml:"total_seconds"`
	RecentSeconds []float64 `json:"recent_seconds" yaml:"recent_seconds"` // oldest first
}

func newDurationsView(d contention.Durations) durationsView {
	v := durationsView{Count: d.Count, RecentSeconds: []float64{}}
	if d.Count == 0 {
		return v
	}
	v.MedianSeconds, v.MaxSeconds = ptr(output.Seconds(d.Median)), ptr(output.Seconds(d.Max))
	v.TotalSeconds = output.Seconds(d.Total)
	for _, r := range d.Recent {
		v.RecentSeconds = append(v.RecentSeconds, output.Seconds(r))
	}
	return v
}

func newContention(s contention.Summary) *contentionView {
	return &contentionView{Wait: newDurationsView(s.Wait), Hold: newDurationsView(s.Hold)}
}

// contentionLines is the text form: waits and holds side by side, with
// sparklines of the recent ones on one scale, and what they mean.
func contentionLines(s contention.Summary) []string {
	if s.Empty() {
		return nil
	}
	top := s.Top()
	row := func(name string, d contention.Durations) string {
		if d.Count == 0 {
			return fmt.Sprintf("%-5s none", name)
		}
		return fmt.Sprintf("%-5s n=%-3d median %-8s max %-8s total %-8s %s", name, d.Count,
			output.Duration(d.Median), output.Duration(d.Max), output.Duration(d.Total), contention.Sparkline(d.Recent, top))
	}
	lines := []string{row("wait", s.Wait), row("hold", s.Hold)}
	if s.Bottleneck() {
		lines = append(lines, "waits exceed holds: the lock is the bottleneck")
	}
	return lines
}
