package tmux

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fence-dev/fence/pkg/guard/sqlguard/pgtest"
)

// TestTopPostgres runs the scenario on a real PostgreSQL server: the fence
// processes and fence top reach it through FENCE_POSTGRES.
func TestTopPostgres(t *testing.T) {
	requireTmux(t)
	t.Parallel()
	srv := pgtest.Start(t)
	runScenario(t, backend{env: []string{"FENCE_POSTGRES=" + srv.URL(srv.CreateDatabase(t))},
		describe: " postgres 127.0.0.1:", freeStays: true, anonWaiters: true})
}

// TestTopPostgresStall: the PostgreSQL server stopped (SIGSTOP of the
// postmaster and its backends) while fence top shows a lock held through
// `fence --postgres URL run` shows as not answering on the status line
// within two seconds (0.5 s of slack for a loaded machine, as
// tui.TestEtcdStallShows), and as answering again once thawed.
func TestTopPostgresStall(t *testing.T) {
	requireTmux(t)
	t.Parallel()
	srv := pgtest.Start(t)
	s := &scenario{t: t, bin: fenceBinary(t), dir: t.TempDir()}
	s.env = baseEnv(s.dir, []string{"FENCE_POSTGRES=" + srv.URL(srv.CreateDatabase(t))})
	s.start("reporter", "run", "reports/daily", "--holder", "reporter", "--ttl", "30s", "--", "sleep", "120")
	p := s.startTop()
	p.waitFor("the held lock", func(scr string) bool {
		return hasRow(scr, "reports/daily", "reporter") && strings.Contains(scr, "1 lock · 1 held · 0 expiring") &&
			strings.Contains(statusLine(scr), "● ok")
	})
	pids := append(descendants(srv.PID()), srv.PID())
	signal := func(sig syscall.Signal) {
		for _, pid := range pids {
			_ = syscall.Kill(pid, sig)
		}
	}
	signal(syscall.SIGSTOP)
	thawed := false
	t.Cleanup(func() {
		if !thawed {
			signal(syscall.SIGCONT)
		}
	})
	stalled := time.Now()
	scr := p.waitFor("the stall on the status line", func(scr string) bool {
		return strings.Contains(statusLine(scr), "no answer for")
	})
	took := time.Since(stalled)
	t.Logf("status line %.1fs into the stall: %q", took.Seconds(), strings.TrimSpace(statusLine(scr)))
	if took > 2500*time.Millisecond {
		t.Errorf("the stall showed %v after it began, want within 2s", took)
	}
	signal(syscall.SIGCONT)
	thawed = true
	p.waitFor("the dashboard answering again", func(scr string) bool {
		return strings.Contains(statusLine(scr), "● ok") && hasRow(scr, "reports/daily", "reporter")
	})
	p.send("q")
	s.checkExit(p, "q")
}
