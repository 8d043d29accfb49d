package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/fence-dev/fence/bench/internal/stats"
)

func TestPostgresSection(t *testing.T) {
	var b strings.Builder
	p := func(f string, args ...any) { fmt.Fprintf(&b, f, args...) }
	postgresSection(p, &Results{})
	if b.Len() != 0 {
		t.Fatalf("a run without the section wrote %q", b.String())
	}
	m := func(xs ...float64) Measure { return Measure{S: stats.Of(xs)} }
	r := &Results{Postgres: PostgresResults{
		Server:  "PostgreSQL 15",
		Run:     []Measure{{Name: nameFencePostgres, Cmd: "fence --postgres $P run bench-pg -- /bin/true", S: stats.Of([]float64{20})}, {Name: nameFenceEtcd, S: stats.Of([]float64{10})}},
		Workers: []int{1, 4}, Impls: []string{implPgFence, implPglock, implPgAdvisory}, Count: 1, Benchtime: "4x",
		Ops: map[string][]Measure{implPgFence: {m(300), m(100)}, implPglock: {m(150), m(10)}, implPgAdvisory: {m(1000), m(900)}},
		Queries: []PgQueries{{Impl: implPgFence, Acquire: 10, Renew: 1, Release: 4, HolderPerMinute: 60}, {Impl: implPglock, Acquire: 2, Renew: 2, Release: 1, WaiterPerMinute: 39.96, HolderPerMinute: 120},
			{Impl: implPgAdvisory, Acquire: 1, Renew: -1, Release: 1}},
		IdleWindow: "4s",
	}}
	b.Reset()
	postgresSection(p, r)
	out := b.String()
	for _, want := range []string{
		"## 6. PostgreSQL",
		"| fence run (postgres) / fence run (etcd) | **2.00x** (2.00x – 2.00x) |",
		"| 4 | **100** (100 – 100) | **10.0** (10.0 – 10.0) | **10.0x** (10.0x – 10.0x) |",
		"| fence | 10 | 1 | 4 | 0 | 60 |",
		"| advisory | 1 | – (no lease) | 1 |",
		"| pglock | 2 | 2 | 1 | 40.0 | 120 |",
		"**no token**",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("section lacks %q:\n%s", want, out)
		}
	}
}
