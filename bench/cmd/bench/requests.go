package main

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os/exec"
	"sort"
	"strconv"
	"strings"
)

// Requests is what one run of a tool asks of the etcd server: the gRPC
// calls the server started for it, by method, as counted by the server
// itself (grpc_server_started_total on its /metrics), over Runs runs. Unlike
// a time, a count does not depend on the machine's load: a change that adds
// a round trip to every run shows here as it is.
type Requests struct {
	Name string
	Cmd  string
	Runs int
	// PerRun is the calls per run by method ("KV/Txn", "Lease/LeaseGrant"),
	// unary calls and streams alike.
	PerRun map[string]float64
}

// Total is the calls per run, all methods.
func (r Requests) Total() float64 {
	t := 0.0
	for _, n := range r.PerRun {
		t += n
	}
	return t
}

// requestCounts runs each etcd tool runs times, one after the other, and
// counts the calls the server started meanwhile. Nothing else talks to the
// server during this section.
func requestCounts(ctx context.Context, cfg *config, srv *etcdServer, runs int) ([]Requests, error) {
	tools := []hfCommand{
		{nameFenceEtcd, fenceEtcdArgv(cfg, srv, "bench-requests", "/bin/true")},
		{nameEtcdctl, etcdctlArgv(cfg, srv, "bench-requests", "/bin/true")},
	}
	if cfg.before != "" {
		tools = append(tools, hfCommand{nameFenceEtcd + " @" + cfg.compare, append([]string{cfg.before}, fenceEtcdArgv(cfg, srv, "bench-requests", "/bin/true")[1:]...)})
	}
	var out []Requests
	for _, tool := range tools {
		before, err := startedCalls(ctx, srv)
		if err != nil {
			return nil, err
		}
		for i := 0; i < runs; i++ {
			cmd := exec.CommandContext(ctx, tool.Argv[0], tool.Argv[1:]...)
			cmd.Env, cmd.Dir = cfg.env, cfg.work
			if b, err := cmd.CombinedOutput(); err != nil {
				return nil, fmt.Errorf("%s: %v\n%s", tool.line(), err, b)
			}
		}
		after, err := startedCalls(ctx, srv)
		if err != nil {
			return nil, err
		}
		r := Requests{Name: tool.Name, Cmd: displayCmd(tool.Argv), Runs: runs, PerRun: map[string]float64{}}
		for m, n := range after {
			if d := n - before[m]; d > 0 {
				r.PerRun[m] = d / float64(runs)
			}
		}
		if r.Total() == 0 {
			return nil, fmt.Errorf("%s: the etcd server counted no calls for it (its /metrics has no grpc_server_started_total?)", tool.line())
		}
		out = append(out, r)
	}
	return out, nil
}

// startedCalls reads grpc_server_started_total from the server's /metrics,
// by "Service/Method" (the etcdserverpb. prefix left out).
func startedCalls(ctx context.Context, srv *etcdServer) (map[string]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.endpoint+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("etcd metrics: %w", err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		// grpc_server_started_total{grpc_method="Txn",grpc_service="etcdserverpb.KV",grpc_type="unary"} 4
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, "grpc_server_started_total{")
		if !ok {
			continue
		}
		labels, value, ok := strings.Cut(rest, "} ")
		if !ok {
			continue
		}
		n, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if err != nil {
			continue
		}
		var method, service string
		for _, kv := range strings.Split(labels, ",") {
			k, v, _ := strings.Cut(kv, "=")
			v = strings.Trim(v, `"`)
			switch k {
			case "grpc_method":
				method = v
			case "grpc_service":
				service = strings.TrimPrefix(v, "etcdserverpb.")
			}
		}
		if method != "" {
			out[service+"/"+method] += n
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("etcd metrics: %s", resp.Status)
	}
	return out, nil
}

// requestsTable writes the calls per run of each tool, one row per method.
func requestsTable(p func(string, ...any), rs []Requests) {
	if len(rs) == 0 {
		return
	}
	p("\n**etcd requests per run**: the gRPC calls the etcd server started for one run of each (its own count, `grpc_server_started_total` on its /metrics, over %d runs each, one after the other, nothing else talking to it). A count does not depend on the load: one round trip more or less per run shows here exactly.\n\n", rs[0].Runs)
	methods := map[string]bool{}
	for _, r := range rs {
		for m := range r.PerRun {
			methods[m] = true
		}
	}
	var ms []string
	for m := range methods {
		ms = append(ms, m)
	}
	sort.Strings(ms)
	p("| call |")
	for _, r := range rs {
		p(" %s |", r.Name)
	}
	p("\n|---|")
	for range rs {
		p("---|")
	}
	p("\n")
	for _, m := range ms {
		p("| %s |", m)
		for _, r := range rs {
			p(" %s |", countCell(r.PerRun[m]))
		}
		p("\n")
	}
	p("| **all** |")
	for _, r := range rs {
		p(" **%s** |", countCell(r.Total()))
	}
	p("\n")
}

func countCell(n float64) string {
	if n == 0 {
		return "–"
	}
	return strconv.FormatFloat(n, 'f', -1, 64)
}
