package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/fence-dev/fence/bench/internal/stats"
)

// hfCommand is one command for hyperfine: a display name and a command line
// that hyperfine runs without a shell (-N), split on blanks.
type hfCommand struct {
	Name string
	Argv []string
}

func (c hfCommand) line() string { return strings.Join(c.Argv, " ") }

// hyperfineExport is the part of hyperfine's --export-json that we read.
type hyperfineExport struct {
	Results []struct {
		Command   string    `json:"command"`
		Times     []float64 `json:"times"`
		ExitCodes []*int    `json:"exit_codes"`
	} `json:"results"`
}

// hyperfine measures cmds, runs times each, in rounds invocations of
// hyperfine that each run every command runs/rounds times (after warmup
// runs), so that a change in the machine's load during the section falls
// on every command alike. It returns the wall times in ms, per name.
func hyperfine(ctx context.Context, cfg *config, tag string, cmds []hfCommand, warmup, runs, rounds int) (map[string][]float64, error) {
	dir := filepath.Join(cfg.work, "hyperfine")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	per := max(runs/rounds, 2)
	times := map[string][]float64{}
	for r := 0; r < rounds; r++ {
		out := filepath.Join(dir, fmt.Sprintf("%s-%d.json", tag, r))
		args := []string{"-N", "--style", "basic", "--warmup", fmt.Sprint(warmup), "--runs", fmt.Sprint(per), "--export-json", out}
		// Alternate the order from one round to the next.
		order := make([]hfCommand, len(cmds))
		for i := range cmds {
			j := i
			if r%2 == 1 {
				j = len(cmds) - 1 - i
			}
			order[i] = cmds[j]
		}
		for _, c := range order {
			args = append(args, "-n", c.Name, c.line())
		}
		cmd := exec.CommandContext(ctx, "hyperfine", args...)
		cmd.Env = cfg.env
		cmd.Dir = cfg.work
		logPath := filepath.Join(dir, fmt.Sprintf("%s-%d.log", tag, r))
		b, err := cmd.CombinedOutput()
		_ = os.WriteFile(logPath, b, 0o644)
		if err != nil {
			return nil, fmt.Errorf("hyperfine (%s): %v\n%s", tag, err, lastLines(string(b), 15))
		}
		var exp hyperfineExport
		raw, err := os.ReadFile(out)
		if err != nil {
			return nil, err
		}
		if err := json.Unmarshal(raw, &exp); err != nil {
			return nil, fmt.Errorf("hyperfine export %s: %w", out, err)
		}
		for _, res := range exp.Results {
			for i, t := range res.Times {
				if i < len(res.ExitCodes) && res.ExitCodes[i] != nil && *res.ExitCodes[i] != 0 {
					return nil, fmt.Errorf("%s exited %d", res.Command, *res.ExitCodes[i])
				}
				times[res.Command] = append(times[res.Command], t*1000)
			}
		}
	}
	for _, c := range cmds {
		if len(times[c.Name]) == 0 {
			return nil, fmt.Errorf("hyperfine reported no times for %q", c.Name)
		}
	}
	return times, nil
}

// measures summarises hyperfine's times in the order of cmds.
func measures(cmds []hfCommand, times map[string][]float64) []Measure {
	var ms []Measure
	for _, c := range cmds {
		ms = append(ms, Measure{Name: c.Name, Cmd: displayCmd(c.Argv), Unit: "ms", S: stats.Of(times[c.Name])})
	}
	return ms
}

// displayCmd shortens the harness's paths in a command line for the report:
// binaries by their base name, the work directory as $W, the etcd endpoint
// as $E.
func displayCmd(argv []string) string {
	out := make([]string, len(argv))
	for i, a := range argv {
		switch {
		case i == 0:
			out[i] = filepath.Base(a)
		case strings.HasPrefix(a, "http://127.0.0.1:"):
			out[i] = "$E"
		case strings.HasPrefix(a, "--endpoints=http://127.0.0.1:"):
			out[i] = "--endpoints=$E"
		case strings.Contains(a, "/fence-bench-"):
			out[i] = "$W/" + filepath.Base(a)
		default:
			out[i] = a
		}
	}
	return strings.Join(out, " ")
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
