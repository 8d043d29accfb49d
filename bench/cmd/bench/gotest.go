package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// benchLine is one result line of `go test -bench`.
type benchLine struct {
	Name    string // without the -GOMAXPROCS suffix, nor go test's "#NN" of a repeated name
	N       int
	Metrics map[string]float64 // unit -> value ("ns/op", "ops/s", ...)
}

// procsSuffix is the -GOMAXPROCS suffix of a result's name, and before it
// the "#01" that go test adds to a sub-benchmark run again under the same
// name (bench/contended's rounds).
var procsSuffix = regexp.MustCompile(`(#\d+)?-\d+$`)

// parseBench reads the Benchmark lines of go test's output.
func parseBench(out string) []benchLine {
	var ls []benchLine
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") {
			continue
		}
		n, err := strconv.Atoi(f[1])
		if err != nil {
			continue
		}
		b := benchLine{Name: procsSuffix.ReplaceAllString(f[0], ""), N: n, Metrics: map[string]float64{}}
		for i := 2; i+1 < len(f); i += 2 {
			if v, err := strconv.ParseFloat(f[i], 64); err == nil {
				b.Metrics[f[i+1]] = v
			}
		}
		ls = append(ls, b)
	}
	return ls
}

// goBench runs `go test -run ^$ -bench re` in pkg and returns its lines.
func goBench(ctx context.Context, cfg *config, tag, pkg, re, benchtime string, count int, env ...string) ([]benchLine, error) {
	args := []string{"test", "-run", "^$", "-bench", re, "-benchtime", benchtime, "-count", fmt.Sprint(count), pkg}
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = cfg.root
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	_ = os.WriteFile(filepath.Join(cfg.work, tag+".gotest.log"), out, 0o644)
	if err != nil {
		return nil, fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, lastLines(string(out), 20))
	}
	ls := parseBench(string(out))
	if len(ls) == 0 {
		return nil, fmt.Errorf("go %s printed no benchmark results:\n%s", strings.Join(args, " "), lastLines(string(out), 20))
	}
	return ls, nil
}
