// Package stats summarises benchmark samples the way docs/benchmarks.md
// quotes them: the median, with the minimum and maximum beside it (the
// machine is shared and noisy, so means and standard deviations mislead).
package stats

import (
	"fmt"
	"math"
	"slices"
)

// Summary is a set of samples reduced to the figures the report quotes.
type Summary struct {
	N                int
	Min, Median, Max float64
	P10, P90         float64
}

// Of summarises xs (which it does not modify). The zero Summary (N == 0) is
// returned for no samples.
func Of(xs []float64) Summary {
	if len(xs) == 0 {
		return Summary{}
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return Summary{
		N:      len(s),
		Min:    s[0],
		Max:    s[len(s)-1],
		Median: Quantile(s, 0.5),
		P10:    Quantile(s, 0.1),
		P90:    Quantile(s, 0.9),
	}
}

// Quantile returns the q-quantile (0 <= q <= 1) of sorted, interpolating
// linearly between the two nearest samples (NaN for no samples).
func Quantile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return math.NaN()
	}
	pos := q * float64(len(sorted)-1)
	lo := int(math.Floor(pos))
	hi := int(math.Ceil(pos))
	if lo == hi {
		return sorted[lo]
	}
	return sorted[lo] + (sorted[hi]-sorted[lo])*(pos-float64(lo))
}

// Scale returns s with every figure multiplied by f (a unit change).
func (s Summary) Scale(f float64) Summary {
	return Summary{N: s.N, Min: s.Min * f, Median: s.Median * f, Max: s.Max * f, P10: s.P10 * f, P90: s.P90 * f}
}

// Ratio compares two summaries: the ratio of the medians, with the ratios
// of the minimums and of the maximums beside it.
type Ratio struct {
	Median, Min, Max float64
}

// RatioOf returns a / b figure by figure.
func RatioOf(a, b Summary) Ratio {
	return Ratio{Median: a.Median / b.Median, Min: a.Min / b.Min, Max: a.Max / b.Max}
}

// String formats the ratio as "2.41x (mins 2.10x, maxes 3.05x)": the ratio
// of the medians, then of the minimums and of the maximums.
func (r Ratio) String() string {
	return fmt.Sprintf("%sx (mins %sx, maxes %sx)", Num(r.Median), Num(r.Min), Num(r.Max))
}

// Num formats a figure with three significant digits, without exponent for
// the magnitudes a report shows.
func Num(x float64) string {
	switch a := math.Abs(x); {
	case math.IsNaN(x) || math.IsInf(x, 0):
		return "n/a"
	case a >= 1000:
		return fmt.Sprintf("%.0f", x)
	case a >= 100:
		return fmt.Sprintf("%.0f", x)
	case a >= 10:
		return fmt.Sprintf("%.1f", x)
	case a >= 1:
		return fmt.Sprintf("%.2f", x)
	case a == 0:
		return "0"
	default:
		return fmt.Sprintf("%.3g", x)
	}
}
