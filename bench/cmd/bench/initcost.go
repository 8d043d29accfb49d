package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"strings"

	"github.com/fence-dev/fence/bench/internal/stats"
)

// InitCost is the package initialisation of one Go binary, from
// GODEBUG=inittrace=1: what every start of it pays before main.
type InitCost struct {
	Name string
	Cmd  string
	// Packages is how many packages have an init that ran.
	Packages int
	// Sum is the sum of the init functions' clock times per run, ms.
	Sum stats.Summary
	// Done is when the last init ended, ms after the runtime started
	// (its @ time plus its clock time): loading and init together.
	Done stats.Summary
	// Top is the packages with the largest median clock time, ms.
	Top []Measure
}

// initCosts runs each binary runs times with GODEBUG=inittrace=1 and sums
// what its inits report.
func initCosts(ctx context.Context, cfg *config, runs int) ([]InitCost, error) {
	bins := []hfCommand{
		{nameFenceVersion, []string{cfg.fence, "version"}},
		{nameEtcdctlVer, []string{cfg.etcdctl, "version"}},
	}
	var out []InitCost
	for _, b := range bins {
		ic := InitCost{Name: b.Name, Cmd: displayCmd(b.Argv)}
		var sums, dones []float64
		per := map[string][]float64{}
		for i := 0; i < runs; i++ {
			cmd := exec.CommandContext(ctx, b.Argv[0], b.Argv[1:]...)
			cmd.Env, cmd.Dir = append(cfg.env, "GODEBUG=inittrace=1"), cfg.work
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			if err := cmd.Run(); err != nil {
				return nil, fmt.Errorf("GODEBUG=inittrace=1 %s: %v\n%s", b.line(), err, stderr.Bytes())
			}
			sum, done, n := 0.0, 0.0, 0
			sc := bufio.NewScanner(&stderr)
			for sc.Scan() {
				// init PKG @0.43 ms, 0.058 ms clock, 4128 bytes, 3 allocs
				f := strings.Fields(sc.Text())
				if len(f) < 7 || f[0] != "init" || !strings.HasPrefix(f[2], "@") || f[6] != "clock," {
					continue
				}
				at, err1 := strconv.ParseFloat(strings.TrimPrefix(f[2], "@"), 64)
				clk, err2 := strconv.ParseFloat(f[4], 64)
				if err1 != nil || err2 != nil {
					return nil, fmt.Errorf("inittrace of %s: bad line %q", b.line(), sc.Text())
				}
				sum += clk
				done = max(done, at+clk)
				per[f[1]] = append(per[f[1]], clk)
				n++
			}
			if n == 0 {
				return nil, fmt.Errorf("inittrace of %s: no init lines", b.line())
			}
			sums, dones = append(sums, sum), append(dones, done)
			ic.Packages = n
		}
		ic.Sum, ic.Done = stats.Of(sums), stats.Of(dones)
		var all []Measure
		for pkg, xs := range per {
			all = append(all, Measure{Name: pkg, Unit: "ms", S: stats.Of(xs)})
		}
		slices.SortFunc(all, func(a, b Measure) int {
			if a.S.Median != b.S.Median {
				if a.S.Median > b.S.Median {
					return -1
				}
				return 1
			}
			return strings.Compare(a.Name, b.Name)
		})
		ic.Top = all[:min(len(all), 8)]
		out = append(out, ic)
	}
	return out, nil
}
