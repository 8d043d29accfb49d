// Package chart draws the small SVG charts of docs/benchmarks.md: horizontal
// bars at the median of each measurement, with a whisker from its minimum to
// its maximum, grouped, on a linear or logarithmic axis, with an optional
// target line. It writes plain SVG 1.1 that GitHub renders inline.
package chart

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"math"
	"strconv"
)

// Bar is one measurement: a median with its range.
type Bar struct {
	// Series indexes Chart.Series: it picks the colour and, unless Label
	// is set, the label.
	Series           int
	Median, Min, Max float64
	Label            string
}

// Group is a set of bars under one heading ("16 waiters").
type Group struct {
	Label string
	Bars  []Bar
}

// Chart is a horizontal bar chart.
type Chart struct {
	Title string
	// Unit is appended to the axis title and to the value beside each bar.
	Unit   string
	Series []string
	Groups []Group
	// Log draws the value axis on a log10 scale (for latencies whose maxima
	// are far above their medians).
	Log bool
	// Target, when positive, draws a dashed vertical line labelled
	// TargetLabel.
	Target      float64
	TargetLabel string
}

// Colours of the series, in order (colour-blind safe, from Okabe-Ito).
var palette = []string{"#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000"}

const (
	width    = 760
	labelW   = 170 // left column: group and series labels
	valueW   = 90  // right column: the median as text
	barH     = 14
	barGap   = 4
	groupGap = 12
	headH    = 18
	top      = 40
	axisH    = 40
)

// SVG renders the chart.
func (c Chart) SVG() []byte {
	lo, hi := c.extent()
	plotL, plotR := float64(labelW), float64(width-valueW)
	x := func(v float64) float64 {
		if c.Log {
			v = math.Max(v, lo)
			return plotL + (math.Log10(v)-math.Log10(lo))/(math.Log10(hi)-math.Log10(lo))*(plotR-plotL)
		}
		return plotL + (v-lo)/(hi-lo)*(plotR-plotL)
	}
	h := top
	for _, g := range c.Groups {
		h += headH + len(g.Bars)*(barH+barGap) + groupGap
	}
	plotBottom := float64(h - groupGap/2)
	legendY := h + axisH
	h = legendY + 24
	var b bytes.Buffer
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", width, h, width, h)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="#ffffff"/>`+"\n")
	fmt.Fprintf(&b, `<text x="%d" y="22" font-size="15" font-weight="bold">%s</text>`+"\n", 10, esc(c.Title))
	// Grid and ticks.
	plotTop := float64(top - 6)
	for _, t := range c.ticks(lo, hi) {
		xt := x(t)
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#dddddd"/>`+"\n", xt, plotTop, xt, plotBottom)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle" fill="#555555">%s</text>`+"\n", xt, plotBottom+14, esc(tickLabel(t)))
	}
	axisTitle := "median, whisker from min to max"
	if c.Unit != "" {
		axisTitle = c.Unit + " — " + axisTitle
	}
	if c.Log {
		axisTitle += " (log scale)"
	}
	fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle" fill="#333333">%s</text>`+"\n", (plotL+plotR)/2, plotBottom+30, esc(axisTitle))
	y := top
	for _, g := range c.Groups {
		fmt.Fprintf(&b, `<text x="10" y="%d" font-weight="bold">%s</text>`+"\n", y+12, esc(g.Label))
		y += headH
		for _, bar := range g.Bars {
			col := palette[bar.Series%len(palette)]
			name := bar.Label
			if name == "" && bar.Series < len(c.Series) {
				name = c.Series[bar.Series]
			}
			fmt.Fprintf(&b, `<text x="18" y="%d" fill="#333333">%s</text>`+"\n", y+barH-3, esc(name))
			x0, xm := x(lo), x(bar.Median)
			fmt.Fprintf(&b, `<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="%s" fill-opacity="0.85"/>`+"\n", x0, y, math.Max(xm-x0, 1), barH, col)
			if bar.Max > bar.Min {
				mid := float64(y) + barH/2.0
				x1, x2 := x(bar.Min), x(bar.Max)
				fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#222222"/>`+"\n", x1, mid, x2, mid)
				fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#222222"/>`+"\n", x1, mid-4, x1, mid+4)
				fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#222222"/>`+"\n", x2, mid-4, x2, mid+4)
			}
			fmt.Fprintf(&b, `<text x="%d" y="%d" fill="#333333">%s</text>`+"\n", width-valueW+6, y+barH-3, esc(tickLabel(bar.Median)+" "+c.Unit))
			y += barH + barGap
		}
		y += groupGap
	}
	if c.Target > 0 && c.Target >= lo && c.Target <= hi {
		xt := x(c.Target)
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#D55E00" stroke-width="1.5" stroke-dasharray="5,3"/>`+"\n", xt, plotTop, xt, plotBottom)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" fill="#D55E00" text-anchor="middle">%s</text>`+"\n", xt, plotTop-2, esc(c.TargetLabel))
	}
	// Legend.
	lx := 10
	for i, s := range c.Series {
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="10" height="10" fill="%s"/>`+"\n", lx, legendY+2, palette[i%len(palette)])
		fmt.Fprintf(&b, `<text x="%d" y="%d">%s</text>`+"\n", lx+14, legendY+11, esc(s))
		lx += 24 + 7*len(s)
	}
	b.WriteString("</svg>\n")
	return b.Bytes()
}

// extent returns the axis range: from 0 (linear) or the decade below the
// smallest minimum (log) to a little above the largest maximum.
func (c Chart) extent() (lo, hi float64) {
	lo, hi = math.Inf(1), math.Inf(-1)
	for _, g := range c.Groups {
		for _, b := range g.Bars {
			for _, v := range []float64{b.Min, b.Median, b.Max} {
				if v > 0 && !math.IsNaN(v) && !math.IsInf(v, 0) {
					lo, hi = math.Min(lo, v), math.Max(hi, v)
				}
			}
		}
	}
	if c.Target > 0 {
		lo, hi = math.Min(lo, c.Target), math.Max(hi, c.Target)
	}
	if math.IsInf(lo, 1) {
		lo, hi = 1, 10
	}
	if c.Log {
		lo = math.Pow(10, math.Floor(math.Log10(lo)))
		hi = niceCeil(hi)
		if hi <= lo {
			hi = lo * 10
		}
		return lo, hi
	}
	return 0, niceCeil(hi * 1.05)
}

// ticks returns the values to mark on the axis.
func (c Chart) ticks(lo, hi float64) []float64 {
	var ts []float64
	if c.Log {
		for d := lo; d <= hi*1.0001; d *= 10 {
			for _, m := range []float64{1, 2, 5} {
				if v := d * m; v <= hi*1.0001 {
					ts = append(ts, v)
				}
			}
		}
		return ts
	}
	step := niceCeil(hi / 6)
	for v := 0.0; v <= hi*1.0001; v += step {
		ts = append(ts, v)
	}
	return ts
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten.
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= v*0.9999 {
			return m * p
		}
	}
	return 10 * p
}

func tickLabel(v float64) string {
	switch a := math.Abs(v); {
	case a == 0:
		return "0"
	case a >= 1e6:
		return strconv.FormatFloat(v/1e6, 'g', 3, 64) + "M"
	case a >= 1e4:
		return strconv.FormatFloat(v/1e3, 'g', 3, 64) + "k"
	case a >= 1000:
		return strconv.FormatFloat(v, 'f', 0, 64)
	default:
		return strconv.FormatFloat(v, 'g', 3, 64)
	}
}

func esc(s string) string {
	var b bytes.Buffer
	_ = xml.EscapeText(&b, []byte(s))
	return b.String()
}
