package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fence-dev/fence/bench/internal/stats"
)

// Section 6: fence on the PostgreSQL coordinator, side by side with
// cirello.io/pglock and pg_advisory_lock on one PostgreSQL server (the Go
// benchmarks of bench/contended/postgres_test.go), and `fence --postgres
// run` beside `fence --endpoints run`.

// Loops of bench/contended on PostgreSQL.
const (
	implPgFence    = "fence"
	implPglock     = "pglock"
	implPgAdvisory = "advisory"

	nameFencePostgres = "fence run (postgres)"
)

// PostgresResults: section 6.
type PostgresResults struct {
	Server string // "PostgreSQL " and its server_version
	// Run is the whole-process time of one locked `true`, fence on
	// PostgreSQL and on etcd, ms.
	Run []Measure
	// The contended loop, as ContendedResults: Ops[impl][i] for Workers[i].
	Workers   []int
	Impls     []string
	Count     int
	Benchtime string
	Ops       map[string][]Measure
	// Queries is what each side sends (BenchmarkPostgresQueries), over an
	// idle window of IdleWindow.
	Queries    []PgQueries
	IdleWindow string
}

// PgQueries counts the statements one side sends (BEGIN and COMMIT
// included): per call, uncontended, and per minute while a waiter waits
// behind a renewing holder. Renew is -1 where there is nothing to renew.
type PgQueries struct {
	Impl                             string
	Acquire, Renew, Release          float64
	WaiterPerMinute, HolderPerMinute float64
}

// pgServer is a throwaway PostgreSQL cluster: initdb into a fresh data
// directory, then postgres on a free loopback port, its unix socket in its
// own directory (as pkg/guard/sqlguard/pgtest does for tests).
type pgServer struct {
	cmd     *exec.Cmd
	done    chan struct{}
	port    int
	version string
}

// pgBinDir is the directory of initdb and postgres: $FENCE_POSTGRES_BIN,
// else the newest /usr/lib/postgresql/*/bin (Debian), else $PATH's.
func pgBinDir() string {
	if d := os.Getenv("FENCE_POSTGRES_BIN"); d != "" {
		return d
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool {
		vi, _ := strconv.ParseFloat(filepath.Base(filepath.Dir(dirs[i])), 64)
		vj, _ := strconv.ParseFloat(filepath.Base(filepath.Dir(dirs[j])), 64)
		return vi > vj
	})
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		return filepath.Dir(p)
	}
	return ""
}

// startPostgres creates a cluster in dir (its data on dataDir) and starts
// it with PostgreSQL's default durability settings. As root it runs as the
// postgres user, which PostgreSQL requires.
func startPostgres(ctx context.Context, dir, dataDir, logPath string) (*pgServer, error) {
	bin := pgBinDir()
	if bin == "" {
		return nil, fmt.Errorf("PostgreSQL is not installed (no initdb in /usr/lib/postgresql/*/bin or $PATH); install the Debian package postgresql")
	}
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return nil, fmt.Errorf("running as root and no postgres user to run PostgreSQL as: %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}
		for _, p := range []string{dir, dataDir} {
			if err := os.Chown(p, uid, gid); err != nil {
				return nil, err
			}
		}
	}
	command := func(name string, args ...string) *exec.Cmd {
		cmd := exec.Command(filepath.Join(bin, name), args...)
		cmd.Dir = dir
		cmd.Env = []string{"PATH=" + bin + ":/usr/bin:/bin", "LC_ALL=C", "TZ=UTC", "HOME=" + dir}
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Setpgid: true, Pdeathsig: syscall.SIGQUIT}
		return cmd
	}
	data := filepath.Join(dataDir, "data")
	if out, err := command("initdb", "-D", data, "-U", "postgres", "--auth=trust", "--no-instructions",
		"--locale=C", "--encoding=UTF8").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("initdb: %v\n%s", err, out)
	}
	var lastErr error
	for range 3 { // a free port may be taken before the server binds it
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		logf, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
		if err != nil {
			return nil, err
		}
		s := &pgServer{port: port, done: make(chan struct{})}
		s.cmd = command("postgres", "-D", data, "-k", dir, "-p", strconv.Itoa(port),
			"-c", "listen_addresses=127.0.0.1", "-c", "max_connections=200", "-c", "log_min_messages=warning")
		s.cmd.Stdout, s.cmd.Stderr = logf, logf
		err = s.cmd.Start()
		logf.Close()
		if err != nil {
			return nil, fmt.Errorf("start postgres: %w", err)
		}
		go func() { s.cmd.Wait(); close(s.done) }()
		if lastErr = s.wait(ctx, logPath); lastErr == nil {
			return s, nil
		}
		s.stop()
	}
	return nil, lastErr
}

// wait waits until the server answers, creates the database fence_bench
// and reads the server's version.
func (s *pgServer) wait(ctx context.Context, logPath string) error {
	deadline := time.Now().Add(60 * time.Second)
	for {
		select {
		case <-s.done:
			return fmt.Errorf("postgres exited at start (see %s)", logPath)
		default:
		}
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		conn, err := pgx.Connect(cctx, s.url("postgres"))
		if err == nil {
			_, err = conn.Exec(cctx, "CREATE DATABASE fence_bench")
			if err == nil {
				err = conn.QueryRow(cctx, "SELECT 'PostgreSQL ' || current_setting('server_version')").Scan(&s.version)
			}
			conn.Close(cctx)
			cancel()
			return err
		}
		cancel()
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("postgres on port %d did not answer: %v (see %s)", s.port, err, logPath)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// url is a URL of database db over TCP on 127.0.0.1, without a password
// (trust authentication).
func (s *pgServer) url(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", s.port, db)
}

func (s *pgServer) stop() {
	if s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGINT) // fast shutdown
	select {
	case <-s.done:
	case <-time.After(30 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
}

// runPostgres is section 6.
func runPostgres(ctx context.Context, cfg *config, srv *etcdServer, res *Results) error {
	dir, err := os.MkdirTemp("/tmp", "fence-bench-pg-") // short: the socket's path
	if err != nil {
		return err
	}
	data, cleanup := tmpfsDir(cfg) // on tmpfs, as etcd's: fsync is cheap for both
	defer func() {
		if !cfg.keep {
			os.RemoveAll(dir)
			cleanup()
		}
	}()
	pg, err := startPostgres(ctx, dir, data, filepath.Join(cfg.work, "postgres.log"))
	if err != nil {
		return err
	}
	defer pg.stop()
	url := pg.url("fence_bench")
	p := &res.Postgres
	p.Server = pg.version

	// Whole-process time, fence on PostgreSQL beside fence on etcd.
	cmds := []hfCommand{
		{nameFencePostgres, []string{cfg.fence, "--postgres", url, "run", "bench-pg", "--", "/bin/true"}},
		{nameFenceEtcd, fenceEtcdArgv(cfg, srv, "bench-pg", "/bin/true")},
	}
	warmup, runs, rounds := cfg.size(3, 1), cfg.size(40, 3), cfg.size(2, 1)
	times, err := hyperfine(ctx, cfg, "run-postgres", cmds, warmup, runs, rounds)
	if err != nil {
		return err
	}
	p.Run = measures(cmds, times)
	for i := range p.Run {
		p.Run[i].Cmd = strings.ReplaceAll(p.Run[i].Cmd, url, "$P")
	}

	// The contended loop.
	benchtime, nrounds := "1500ms", 3
	if cfg.smoke {
		benchtime, nrounds = "4x", 1
	}
	p.Workers, p.Impls = []int{1, 4, 16}, []string{implPgFence, implPglock, implPgAdvisory}
	p.Count, p.Benchtime = nrounds, benchtime
	p.Ops = map[string][]Measure{}
	env := []string{"FENCE_BENCH_POSTGRES=" + url}
	ls, err := goBench(ctx, cfg, "contended-postgres", "./bench/contended", "^BenchmarkContendedPostgres$", benchtime, 1,
		append(env, fmt.Sprintf("FENCE_BENCH_ROUNDS=%d", nrounds))...)
	if err != nil {
		return err
	}
	for _, im := range p.Impls {
		for _, n := range p.Workers {
			name := fmt.Sprintf("BenchmarkContendedPostgres/impl=%s/workers=%d", im, n)
			var xs []float64
			for _, l := range ls {
				if l.Name == name {
					xs = append(xs, l.Metrics["ops/s"])
				}
			}
			if len(xs) == 0 {
				return fmt.Errorf("no result for %s", name)
			}
			p.Ops[im] = append(p.Ops[im], Measure{Name: fmt.Sprintf("%s, %d goroutines", im, n), Unit: "ops/s", S: stats.Of(xs)})
		}
	}

	// Statements per step and of an idle waiter.
	p.IdleWindow = cfg.dur(30*time.Second, 4*time.Second).String()
	ls, err = goBench(ctx, cfg, "queries-postgres", "./bench/contended", "^BenchmarkPostgresQueries$", "1x", 1,
		append(env, "FENCE_BENCH_IDLE_WINDOW="+p.IdleWindow)...)
	if err != nil {
		return err
	}
	for _, im := range p.Impls {
		l, ok := lineNamed(ls, "BenchmarkPostgresQueries/impl="+im)
		if !ok {
			return fmt.Errorf("no result for BenchmarkPostgresQueries/impl=%s", im)
		}
		p.Queries = append(p.Queries, PgQueries{Impl: im, Acquire: l.Metrics["q/acquire"], Renew: l.Metrics["q/renew"],
			Release: l.Metrics["q/release"], WaiterPerMinute: l.Metrics["waiter-q/min"], HolderPerMinute: l.Metrics["holder-q/min"]})
	}
	return nil
}

func lineNamed(ls []benchLine, name string) (benchLine, bool) {
	for _, l := range ls {
		if l.Name == name {
			return l, true
		}
	}
	return benchLine{}, false
}

// postgresSection writes section 6 of the report (nothing for results of
// a run before it existed).
func postgresSection(p func(string, ...any), r *Results) {
	pg := r.Postgres
	if len(pg.Run) == 0 && len(pg.Ops) == 0 {
		return
	}
	p("## 6. PostgreSQL: fence, pglock, advisory locks\n\n")
	p("One PostgreSQL server started by the harness (%s), its data on tmpfs as etcd's, PostgreSQL's default durability settings, over TCP on 127.0.0.1.\n\n", pg.Server)
	p("**Whole-process time** of one locked `true`, fence on PostgreSQL beside fence on the harness's etcd (hyperfine as in section 1; `$P` is the database's URL). ms.\n\n| command | measured as | wall ms: median (min – max) |\n|---|---|---|\n")
	for _, x := range pg.Run {
		p("| %s | `%s` | %s |\n", x.Name, x.Cmd, cell(x.S))
	}
	p("\n| comparison | ratio of wall times |\n|---|---|\n| fence run (postgres) / fence run (etcd) | %s |\n\n",
		ratioCell(find(pg.Run, nameFencePostgres).S, find(pg.Run, nameFenceEtcd).S))

	p("**Contended throughput**: `FENCE_BENCH_ROUNDS=%d go test ./bench/contended -bench BenchmarkContendedPostgres -benchtime %s`, the loop of section 3 on PostgreSQL: N goroutines, each with its own connections, loop over acquire, one guarded write, release, on one lock. The guarded write is the same for all three: sqlguard's fenced upsert (`INSERT … ON CONFLICT DO UPDATE … WHERE cur.fence <= EXCLUDED.fence`) into a table of the same database. ", pg.Count, pg.Benchtime)
	p("*fence* is `fencing.Acquire` on pkg/coord/postgres, the write with `Held.Token()`. *pglock* is cirello.io/pglock's `AcquireContext`/`ReleaseContext` (lease 3 s; no heartbeats, since each hold lasts milliseconds: with its README's heartbeat every second, the first heartbeat races with a quick release, which then fails and leaves the row to be taken over a lease later), the write with its record version number (from a sequence, so it grows from one holder to the next). A pglock waiter that finds the lock taken sleeps one lease before it tries again, and a holder that releases and asks again at once may take the lock again ahead of the sleepers: pglock is not first come, first served. ")
	p("*advisory* is `pg_advisory_lock`/`pg_advisory_unlock` on one session per goroutine: it has **no token**, so its write is the same statement with the constant token 1, which fences nothing. Each loop checks that no two goroutines are inside at once and that no write is refused. Acquisitions per second.\n\n")
	p("| goroutines | fence | pglock | fence / pglock | advisory | fence / advisory |\n|---|---|---|---|---|---|\n")
	for i, n := range pg.Workers {
		get := func(im string) stats.Summary {
			if g := pg.Ops[im]; i < len(g) {
				return g[i].S
			}
			return stats.Summary{}
		}
		f, pl, ad := get(implPgFence), get(implPglock), get(implPgAdvisory)
		p("| %d | %s | %s | %s | %s | %s |\n", n, cell(f), cell(pl), ratioCell(f, pl), cell(ad), ratioCell(f, ad))
	}
	if len(pg.Queries) > 0 {
		p("\n**Statements sent** (`go test ./bench/contended -bench BenchmarkPostgresQueries -benchtime 1x`; counted in the client by a pgx `QueryTracer`, BEGIN and COMMIT included, each a round trip). Per call: uncontended, the mean of 5 (fence: the coordinator's `Acquire`, `Renew`, `Release`; pglock: `AcquireContext`, `SendHeartbeat`, `ReleaseContext`). Per minute: one goroutine holds the lock with a lease of 3 s renewed every second (fence's `Held` renews every TTL/3; pglock's heartbeat every second, its README's settings) while another waits for it, both counted over %s after the waiter has waited a second.\n\n", pg.IdleWindow)
		p("| | per acquisition | per renewal | per release | idle waiter, per minute | its holder, per minute |\n|---|---|---|---|---|---|\n")
		for _, q := range pg.Queries {
			renew := countNum(q.Renew)
			if q.Renew < 0 {
				renew = "– (no lease)"
			}
			p("| %s | %s | %s | %s | %s | %s |\n", q.Impl, countNum(q.Acquire), renew, countNum(q.Release), countNum(q.WaiterPerMinute), countNum(q.HolderPerMinute))
		}
		p("\nA fence waiter follows the holder's renewals through LISTEN/NOTIFY and sends nothing while they come; a pglock waiter polls once per lease; an advisory-lock waiter sits in one `pg_advisory_lock` statement that the server answers when the lock is free.\n")
	}
	p("\n")
}

// countNum is a count: whole, or to one decimal place (a mean, a rate).
func countNum(x float64) string {
	if x == float64(int64(x)) {
		return strconv.FormatInt(int64(x), 10)
	}
	return strconv.FormatFloat(x, 'f', 1, 64)
}
