package main

import (
	"fmt"
	"time"

	"github.com/fence-dev/fence/bench/internal/stats"
)

// Results is everything one run measured; it is also written as
// docs/benchmarks/results.json.
type Results struct {
	Smoke          bool
	Started        time.Time
	Seconds        float64
	SectionSeconds []SectionTime
	Machine        Machine
	Load           LoadStats

	Run       RunResults
	Memory    MemoryResults
	Handoff   HandoffResults
	Contended ContendedResults
	Scale     ScaleResults
	Postgres  PostgresResults `json:",omitzero"`

	Targets []Target

	// Baseline is an earlier run (--baseline), shown beside this one: the
	// figures before a change.
	Baseline *Results `json:",omitempty"`
}

// SectionTime is how long one section of the harness took.
type SectionTime struct {
	Name    string
	Seconds float64
}

// Measure is one measured command or loop, summarised.
type Measure struct {
	Name string
	// Cmd is the command line as measured (empty for Go loops).
	Cmd  string
	Unit string
	S    stats.Summary
}

// find returns the measure called name (a zero Measure when absent).
func find(ms []Measure, name string) Measure {
	for _, m := range ms {
		if m.Name == name {
			return m
		}
	}
	return Measure{Name: name}
}

// RunResults: whole-process time of one locked `true` (section 1).
type RunResults struct {
	Runs   int // runs per command, over all rounds
	Rounds int // hyperfine invocations, alternating the commands
	Local  []Measure
	Etcd   []Measure
	// Compare is the git revision whose fence was measured beside this one
	// (--compare; its measures are named "... @REV").
	Compare string `json:",omitempty"`
	// Init is the package initialisation of fence and etcdctl.
	Init []InitCost `json:",omitempty"`
	// Requests is what one run of each asks of the etcd server.
	Requests []Requests `json:",omitempty"`
}

// MemoryResults: peak resident memory (section 5).
type MemoryResults struct {
	Runs int
	// Peak is /usr/bin/time's maximum resident set size, in MiB.
	Peak []Measure
	// Holding is the resident memory of each process while a lock is held
	// around a command that waits (fence and its watchdog counted apart), in
	// MiB.
	Holding []Measure
	// Concurrent is N held fence runs at once: PSS summed over fence and
	// its watchdogs, per build and backend.
	Concurrent []ConcurrentMemory `json:",omitempty"`
}

// HandoffResults: from one holder's command ending to the next holder's
// command starting (section 2).
type HandoffResults struct {
	Waiters []int
	Tools   []string
	// Gaps[tool][i] is the gap for Waiters[i], in ms.
	Gaps map[string][]Measure
	// StartCost is the time from fork to the stamp helper's first stamp, when
	// the harness starts it directly: the part of every gap that is the
	// command's own start, for every tool alike.
	StartCost Measure
	// GoAPI is the coordinators' own handoff through the Go API, without
	// processes (pkg/coord/etcd and pkg/coord/local BenchmarkHandoff): the
	// median of each run, ms.
	GoAPI []Measure
}

// ContendedResults: acquire, guarded write, release in a loop (section 3).
type ContendedResults struct {
	Workers   []int
	Impls     []string
	Count     int // rounds (bench/contended, FENCE_BENCH_ROUNDS); -count in runs before it had rounds
	Benchtime string
	// Ops[impl][i] is the throughput with Workers[i] goroutines, in ops/s.
	Ops map[string][]Measure
}

// ScaleResults: section 4.
type ScaleResults struct {
	Leases []LeaseScale
	List   []Measure // `fence list` whole-process time, ms, per backend
	// Frame is the dashboard's frame time at 10,000 locks (tui's Go
	// benchmarks), in ms.
	Frame []Measure
}

// LeaseScale is one process holding and renewing many leases.
type LeaseScale struct {
	Backend        string
	Leases         int
	TTL            string
	AcquireSeconds float64
	WindowSeconds  float64
	CPUSeconds     float64 // user + system over the window
	CPUShare       float64 // CPUSeconds / WindowSeconds: 1.0 = one core
	UserShare      float64
	SysShare       float64
	Renewals       int // acknowledged renewals in the window
	RenewFailures  int
	Lost           int    // leases lost while held (should be 0)
	LostFirst      string // the error of the first lost lease
	RSSMiB         float64
	HWMMiB         float64
	HeapMiB        float64
	Goroutines     int
}

// Target is one of the targets, checked against the figures.
type Target struct {
	Name   string
	Goal   string
	Value  string
	Met    bool
	Absent bool // not measured in this run
}

// Verdict is "met", "MISSED" or "not measured".
func (t Target) Verdict() string {
	switch {
	case t.Absent:
		return "not measured"
	case t.Met:
		return "met (" + t.Value + ")"
	default:
		return "MISSED (" + t.Value + ")"
	}
}

// Target names, used by the report to pick its explanations.
const (
	TargetLocalRun  = "local fence run vs flock"
	TargetEtcdRun   = "etcd fence run vs etcdctl lock"
	TargetVersion   = "fence version vs etcdctl version"
	TargetLeases    = "10,000 renewed leases (etcd)"
	TargetLeasesLoc = "renewed leases (local), per 10,000"
)

// evaluate fills Targets from the figures (the baseline's too).
func (r *Results) evaluate() {
	if r.Baseline != nil {
		r.Baseline.evaluate()
	}
	r.Targets = nil
	add := func(t Target) { r.Targets = append(r.Targets, t) }

	fl, fk := find(r.Run.Local, nameFenceLocal), find(r.Run.Local, nameFlock)
	t := Target{Name: TargetLocalRun, Goal: "≤ 10x flock's wall time (medians)", Absent: fl.S.N == 0 || fk.S.N == 0}
	if !t.Absent {
		ratio := stats.RatioOf(fl.S, fk.S)
		t.Value, t.Met = ratio.String(), ratio.Median <= 10
	}
	add(t)

	fe, ec := find(r.Run.Etcd, nameFenceEtcd), find(r.Run.Etcd, nameEtcdctl)
	t = Target{Name: TargetEtcdRun, Goal: "≤ 1.4x etcdctl lock's wall time (medians)", Absent: fe.S.N == 0 || ec.S.N == 0}
	if !t.Absent {
		ratio := stats.RatioOf(fe.S, ec.S)
		t.Value, t.Met = ratio.String(), ratio.Median <= 1.4
	}
	add(t)

	fv, ev := find(r.Run.Local, nameFenceVersion), find(r.Run.Etcd, nameEtcdctlVer)
	t = Target{Name: TargetVersion, Goal: "≤ 1.6x etcdctl version's wall time (medians)", Absent: fv.S.N == 0 || ev.S.N == 0}
	if !t.Absent {
		ratio := stats.RatioOf(fv.S, ev.S)
		t.Value, t.Met = ratio.String(), ratio.Median <= 1.6
	}
	add(t)

	for _, l := range r.Scale.Leases {
		name := TargetLeases
		switch l.Backend {
		case "local":
			name = TargetLeasesLoc
		case "etcd":
		default:
			continue // a reference, not fence
		}
		// Renewal work grows with the number of leases: a run with fewer
		// than 10,000 is scaled up to 10,000.
		share := l.CPUShare * 10000 / float64(l.Leases)
		v := fmt.Sprintf("%s%% of one core for %d leases", stats.Num(100*l.CPUShare), l.Leases)
		if l.Leases != 10000 {
			v += fmt.Sprintf(", so about %s%% for 10,000", stats.Num(100*share))
		}
		if l.Lost > 0 {
			v += fmt.Sprintf("; %d leases lost", l.Lost)
		}
		add(Target{Name: name, Goal: "≤ 5% of one core", Value: v, Met: share <= 0.05 && l.Lost == 0})
	}
}

// target returns the target called name.
func (r *Results) target(name string) Target {
	for _, t := range r.Targets {
		if t.Name == name {
			return t
		}
	}
	return Target{Name: name, Absent: true}
}
