package stats

import (
	"math"
	"testing"
)

func TestOf(t *testing.T) {
	s := Of([]float64{5, 1, 4, 2, 3})
	if s.N != 5 || s.Min != 1 || s.Max != 5 || s.Median != 3 {
		t.Fatalf("Of = %+v", s)
	}
	if got := Of([]float64{4, 1, 3, 2}).Median; got != 2.5 {
		t.Fatalf("median of 1..4 = %v, want 2.5", got)
	}
	if got := Of(nil); got.N != 0 {
		t.Fatalf("Of(nil) = %+v", got)
	}
	xs := []float64{3, 1, 2}
	Of(xs)
	if xs[0] != 3 {
		t.Fatal("Of sorted its argument")
	}
}

func TestQuantile(t *testing.T) {
	s := []float64{0, 10, 20, 30, 40, 50, 60, 70, 80, 90, 100}
	for q, want := range map[float64]float64{0: 0, 0.1: 10, 0.5: 50, 0.9: 90, 1: 100, 0.15: 15} {
		if got := Quantile(s, q); math.Abs(got-want) > 1e-9 {
			t.Errorf("Quantile(%v) = %v, want %v", q, got, want)
		}
	}
	if !math.IsNaN(Quantile(nil, 0.5)) {
		t.Error("Quantile(nil) is not NaN")
	}
}

func TestRatio(t *testing.T) {
	a := Summary{N: 3, Min: 2, Median: 6, Max: 12}
	b := Summary{N: 3, Min: 1, Median: 2, Max: 3}
	r := RatioOf(a, b)
	if r.Median != 3 || r.Min != 2 || r.Max != 4 {
		t.Fatalf("RatioOf = %+v", r)
	}
	if got, want := r.String(), "3.00x (mins 2.00x, maxes 4.00x)"; got != want {
		t.Fatalf("String = %q, want %q", got, want)
	}
}

func TestNum(t *testing.T) {
	for x, want := range map[float64]string{1234.5: "1234", 123.4: "123", 12.34: "12.3", 1.234: "1.23", 0.01234: "0.0123", 0: "0", math.NaN(): "n/a"} {
		if got := Num(x); got != want {
			t.Errorf("Num(%v) = %q, want %q", x, got, want)
		}
	}
}
