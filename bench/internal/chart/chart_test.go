package chart

import (
	"encoding/xml"
	"io"
	"strings"
	"testing"
)

// wellFormed fails the test unless b parses as XML.
func wellFormed(t *testing.T, b []byte) {
	t.Helper()
	d := xml.NewDecoder(strings.NewReader(string(b)))
	for {
		_, err := d.Token()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatalf("SVG is not well-formed XML: %v\n%s", err, b)
		}
	}
}

func TestSVG(t *testing.T) {
	for _, log := range []bool{false, true} {
		c := Chart{
			Title:  "handoff <latency> & more",
			Unit:   "ms",
			Series: []string{"fence", "etcdctl lock"},
			Groups: []Group{
				{Label: "1 waiter", Bars: []Bar{{Series: 0, Median: 1.5, Min: 1.1, Max: 9}, {Series: 1, Median: 2.5, Min: 2, Max: 30}}},
				{Label: "32 waiters", Bars: []Bar{{Series: 0, Median: 1.7, Min: 1.2, Max: 12}, {Series: 1, Median: 2.2, Min: 2, Max: 3, Label: "own label"}}},
			},
			Log:         log,
			Target:      2,
			TargetLabel: "target 2 ms",
		}
		b := c.SVG()
		wellFormed(t, b)
		s := string(b)
		for _, want := range []string{"handoff &lt;latency&gt; &amp; more", "32 waiters", "etcdctl lock", "own label", "target 2 ms", "<rect"} {
			if !strings.Contains(s, want) {
				t.Errorf("log=%v: SVG lacks %q", log, want)
			}
		}
	}
}

func TestSVGEmpty(t *testing.T) {
	wellFormed(t, Chart{Title: "nothing"}.SVG())
}

func TestNiceCeil(t *testing.T) {
	for v, want := range map[float64]float64{0.7: 1, 1: 1, 1.2: 2, 3: 5, 7: 10, 42: 50, 180: 200} {
		if got := niceCeil(v); got != want {
			t.Errorf("niceCeil(%v) = %v, want %v", v, got, want)
		}
	}
}
