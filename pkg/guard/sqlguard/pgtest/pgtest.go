// Package pgtest starts a throwaway PostgreSQL cluster for tests: initdb into
// a fresh directory, then the postgres server on a free loopback port and a
// unix socket in that directory, stopped and removed when the test ends.
//
// Only test code imports it.
//
//	srv := pgtest.Start(t)           // skips when PostgreSQL is not installed
//	db := srv.Open(t, srv.CreateDatabase(t))
//
// The binaries are found in $FENCE_POSTGRES_BIN, then on $PATH, then in the
// newest /usr/lib/postgresql/*/bin (Debian). When they are missing the test is
// skipped, unless FENCE_REQUIRE_POSTGRES is set (CI): then it fails.
//
// PostgreSQL refuses to run as root; as root, the cluster is created and run
// as the "postgres" user (else "nobody"), its directory owned by that user.
// The server gets SIGQUIT if the test process dies, so no cluster outlives
// its test.
package pgtest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver
)

// RequireEnv, when set in the environment, makes a missing PostgreSQL a test
// failure instead of a skip.
const RequireEnv = "FENCE_REQUIRE_POSTGRES"

// BinEnv names a directory holding initdb and postgres.
const BinEnv = "FENCE_POSTGRES_BIN"

// User is the database superuser of the cluster (trust authentication).
const User = "postgres"

// Server is a running throwaway cluster.
type Server struct {
	bin     string // directory of initdb, postgres, psql
	dir     string // cluster root: data/, sock/, log
	sockDir string
	port    int
	cmd     *exec.Cmd
	exited  chan struct{}
	admin   *sql.DB
	dbs     atomic.Int64
	cred    *syscall.Credential
	data    string
}

// FindBin returns the directory holding initdb and postgres, or "" when
// PostgreSQL is not installed.
func FindBin() string {
	has := func(dir string) bool {
		for _, b := range []string{"initdb", "postgres"} {
			if fi, err := os.Stat(filepath.Join(dir, b)); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
				return false
			}
		}
		return true
	}
	if d := os.Getenv(BinEnv); d != "" {
		if has(d) {
			return d
		}
		return ""
	}
	if p, err := exec.LookPath("initdb"); err == nil && has(filepath.Dir(p)) {
		return filepath.Dir(p)
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { // newest version first
		vi, _ := strconv.ParseFloat(filepath.Base(filepath.Dir(dirs[i])), 64)
		vj, _ := strconv.ParseFloat(filepath.Base(filepath.Dir(dirs[j])), 64)
		return vi > vj
	})
	for _, d := range dirs {
		if has(d) {
			return d
		}
	}
	return ""
}

// Start creates and starts a cluster for the duration of the test.
func Start(t testing.TB) *Server {
	t.Helper()
	bin := FindBin()
	if bin == "" {
		msg := "PostgreSQL is not installed (no initdb/postgres in $" + BinEnv + ", $PATH or /usr/lib/postgresql/*/bin); install Debian's postgresql package"
		if os.Getenv(RequireEnv) != "" {
			t.Fatalf("%s (%s is set, so this fails instead of skipping)", msg, RequireEnv)
		}
		t.Skipf("%s, or set %s=1 to make this a failure", msg, RequireEnv)
	}
	cred, err := credential()
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	base := os.TempDir()
	if os.Geteuid() == 0 || len(base) > 40 {
		base = "/tmp" // traversable by the server's user; short socket paths
	}
	dir, err := os.MkdirTemp(base, "fence-pg-")
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	s := &Server{bin: bin, dir: dir, sockDir: filepath.Join(dir, "sock")}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Mkdir(s.sockDir, 0o700); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	if cred != nil {
		for _, p := range []string{dir, s.sockDir} {
			if err := os.Chown(p, int(cred.Uid), int(cred.Gid)); err != nil {
				t.Fatalf("pgtest: %v", err)
			}
		}
	}
	data := filepath.Join(dir, "data")
	initdb := s.command(cred, "initdb", "-D", data, "-U", User, "--auth=trust", "--no-sync",
		"--no-instructions", "--locale=C", "--encoding=UTF8")
	if out, err := initdb.CombinedOutput(); err != nil {
		t.Fatalf("pgtest: initdb: %v\n%s", err, out)
	}

	var lastErr error
	for range 3 { // a free port may be taken again before the server binds it
		if lastErr = s.start(cred, data); lastErr == nil {
			break
		}
		s.port = 0
	}
	if lastErr != nil {
		t.Fatalf("pgtest: %v", lastErr)
	}
	t.Cleanup(s.stop)
	if s.admin, err = sql.Open("pgx", s.DSN("postgres")); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(func() { s.admin.Close() })
	return s
}

// credential is the user to run PostgreSQL as: nil when not root.
func credential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	var errs []error
	for _, name := range []string{"postgres", "nobody"} {
		u, err := user.Lookup(name)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		uid, _ := strconv.ParseUint(u.Uid, 10, 32)
		gid, _ := strconv.ParseUint(u.Gid, 10, 32)
		if uid == 0 {
			continue
		}
		return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}, nil
	}
	return nil, fmt.Errorf("running as root and no unprivileged user to run PostgreSQL as: %w", errors.Join(errs...))
}

func (s *Server) command(cred *syscall.Credential, name string, args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(s.bin, name), args...)
	cmd.Dir = s.dir
	cmd.Env = []string{"PATH=" + s.bin + ":/usr/bin:/bin", "LC_ALL=C", "TZ=UTC", "HOME=" + s.dir}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	return cmd
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func (s *Server) start(cred *syscall.Credential, data string) error {
	s.cred, s.data = cred, data
	port := s.port
	if port == 0 {
		var err error
		if port, err = freePort(); err != nil {
			return err
		}
	}
	logPath := filepath.Join(s.dir, fmt.Sprintf("postgres-%d.log", port))
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := s.command(cred, "postgres", "-D", data, "-k", s.sockDir, "-p", strconv.Itoa(port),
		"-c", "listen_addresses=127.0.0.1",
		"-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
		"-c", "max_connections=200", "-c", "log_min_messages=warning")
	cmd.Stdout, cmd.Stderr = logf, logf
	setDeathSignal(cmd.SysProcAttr, syscall.SIGQUIT) // immediate shutdown if the test process dies
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start postgres: %w", err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	s.cmd, s.exited, s.port = cmd, exited, port

	db, err := sql.Open("pgx", s.DSN("postgres"))
	if err != nil {
		return err
	}
	defer db.Close()
	deadline := time.Now().Add(60 * time.Second) // hang guard
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := db.PingContext(ctx)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-exited:
			log, _ := os.ReadFile(logPath)
			return fmt.Errorf("postgres exited during start-up: %s", strings.TrimSpace(string(log)))
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.stop()
			log, _ := os.ReadFile(logPath)
			return fmt.Errorf("postgres did not accept connections within 60s: %v\n%s", err, log)
		}
	}
}

// stop shuts the server down (fast shutdown, SIGKILL after 30 s).
func (s *Server) stop() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-s.exited:
	case <-time.After(30 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.exited
	}
}

// Restart stops the server (a fast shutdown, as a service restart does) and
// starts it again on its data directory and port.
func (s *Server) Restart(t testing.TB) { t.Helper(); s.RestartAfter(t, 0) }

// RestartAfter is Restart with the server down for down.
func (s *Server) RestartAfter(t testing.TB, down time.Duration) {
	t.Helper()
	s.stop()
	time.Sleep(down)
	if err := s.start(s.cred, s.data); err != nil {
		t.Fatalf("pgtest: restart: %v", err)
	}
}

// PID is the server's postmaster process (a new one after Restart): fault
// tests freeze the server by stopping it and its children.
func (s *Server) PID() int { return s.cmd.Process.Pid }

// Port is the server's TCP port on 127.0.0.1.
func (s *Server) Port() int { return s.port }

// SocketDir is the directory of the server's unix socket.
func (s *Server) SocketDir() string { return s.sockDir }

// BinDir is the directory of the PostgreSQL programs (psql among them).
func (s *Server) BinDir() string { return s.bin }

// DSN returns a keyword/value connection string (libpq and pgx) for database
// name over the unix socket.
func (s *Server) DSN(name string) string {
	return fmt.Sprintf("host=%s port=%d user=%s dbname=%s sslmode=disable", s.sockDir, s.port, User, name)
}

// URL returns a postgres:// URL for database name over TCP on 127.0.0.1.
func (s *Server) URL(name string) string {
	return fmt.Sprintf("postgres://%s@127.0.0.1:%d/%s?sslmode=disable", User, s.port, name)
}

// Env returns PGHOST, PGPORT, PGUSER and PGDATABASE for database name, for
// psql and other libpq clients run by a test.
func (s *Server) Env(name string) []string {
	return []string{"PGHOST=" + s.sockDir, "PGPORT=" + strconv.Itoa(s.port), "PGUSER=" + User, "PGDATABASE=" + name}
}

// CreateDatabase creates a new, empty database and returns its name.
func (s *Server) CreateDatabase(t testing.TB) string {
	t.Helper()
	name := fmt.Sprintf("fence_test_%d", s.dbs.Add(1))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := s.admin.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("pgtest: create database: %v", err)
	}
	return name
}

// Open opens database name through the pgx database/sql driver; the handle
// is closed at cleanup.
func (s *Server) Open(t testing.TB, name string) *sql.DB {
	t.Helper()
	db, err := sql.Open("pgx", s.DSN(name))
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// StartStandby makes a streaming standby of s (pg_basebackup -R from it, a
// data directory of its own, its own port and socket), starts it, and
// waits until s reports it streaming (pg_stat_replication); it is stopped
// and removed when the test ends. It is read-only: its databases are s's
// (CreateDatabase fails on it).
func (s *Server) StartStandby(t testing.TB) *Server {
	t.Helper()
	dir, err := os.MkdirTemp(filepath.Dir(s.dir), "fence-pg-standby-")
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sb := &Server{bin: s.bin, dir: dir, sockDir: filepath.Join(dir, "sock")}
	if err := os.Mkdir(sb.sockDir, 0o700); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	if s.cred != nil {
		for _, p := range []string{dir, sb.sockDir} {
			if err := os.Chown(p, int(s.cred.Uid), int(s.cred.Gid)); err != nil {
				t.Fatalf("pgtest: %v", err)
			}
		}
	}
	data := filepath.Join(dir, "data")
	// pg_basebackup is beside postgres's real file (initdb and postgres may
	// be links to it, as in /usr/local/bin).
	if real, err := filepath.EvalSymlinks(filepath.Join(s.bin, "postgres")); err == nil {
		sb.bin = filepath.Dir(real)
	}
	backup := sb.command(s.cred, "pg_basebackup", "-h", s.sockDir, "-p", strconv.Itoa(s.port), "-U", User,
		"-D", data, "-R", "-X", "stream", "--no-sync", "-c", "fast")
	if out, err := backup.CombinedOutput(); err != nil {
		t.Fatalf("pgtest: pg_basebackup: %v\n%s", err, out)
	}
	if err := sb.start(s.cred, data); err != nil {
		t.Fatalf("pgtest: standby: %v", err)
	}
	t.Cleanup(sb.stop)
	if sb.admin, err = sql.Open("pgx", sb.DSN("postgres")); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(func() { sb.admin.Close() })
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(20 * time.Millisecond) { // hang guard
		var n int
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := s.admin.QueryRowContext(ctx, "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'").Scan(&n)
		cancel()
		if err == nil && n > 0 {
			return sb
		}
		if time.Now().After(deadline) {
			t.Fatalf("pgtest: the standby is not streaming after 60 s (%v)", err)
		}
	}
}
