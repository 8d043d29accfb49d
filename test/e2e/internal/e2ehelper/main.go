// Command e2ehelper is the command that the end-to-end tests run under
// `fence run`: it writes to the fenced stores with $FENCE_TOKEN.
//
//	e2ehelper write --via pg|guard --value V --outcome FILE [--ready FILE] [--go FILE] [--peer PID@START]
//
// writes "ready" (its PID and token, as JSON) to the ready file, waits until
// the go file exists, records the state of the peer process (running,
// stopped or gone), then writes V with its token: to row 42 of the
// PostgreSQL table "jobs" ($E2E_PG_DSN) through sqlguard's fenced UPDATE
// (--via pg), or with `$E2E_FENCE guard put job-42/result --token N V`
// (--via guard). It records the outcome as JSON in the outcome file and
// exits 0 when the write was accepted, 77 when it was refused as stale,
// 1 on any other failure.
//
//	e2ehelper incr
//
// is one holder of the concurrent counter test: it claims row 1 of the
// table "counter" with its token, reads the value, thinks for 20 to 60 ms,
// then increments it up to $E2E_MAX times (fenced UPDATEs, each writing the value it knows + 1),
// logging every operation to a file of its own in $E2E_LOG_DIR (package
// oplog). It stops early, with 0, when the file $E2E_STOP exists, and at
// the first refused write (77) or failed one (1).
//
//	e2ehelper shard --log DIR [--go FILE]
//
// is the command of a `fence shards run` member: it writes its start
// record (member, PID and start time, boot-clock instant, shard tokens) to
// DIR/MEMBER-PID.start, then writes its member id to every shard's guard
// key GROUP/shard/N/data with that shard's token from $FENCE_SHARD_TOKENS
// (the local guard store of $FENCE_STATE_DIR, or the etcd one of
// $FENCE_ENDPOINTS under $FENCE_PREFIX) and records each outcome in
// DIR/MEMBER-PID.first; with --go it then waits for FILE, writes every
// shard again and records that in DIR/MEMBER-PID.late. Then it sleeps until
// a signal ends it.
package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fence-dev/fence/internal/clock"
	"github.com/fence-dev/fence/internal/proc"
	"github.com/fence-dev/fence/pkg/guard"
	"github.com/fence-dev/fence/pkg/guard/etcdstore"
	"github.com/fence-dev/fence/pkg/guard/localstore"
	"github.com/fence-dev/fence/pkg/guard/sqlguard"
	"github.com/fence-dev/fence/test/e2e/internal/oplog"
)

// Exit codes.
const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
	exitStale = 77
)

// opTimeout bounds one statement. It is far longer than any freeze the
// tests apply, so that a statement in flight across a freeze is not
// abandoned.
const opTimeout = 30 * time.Second

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: e2ehelper write|incr ...")
		os.Exit(exitUsage)
	}
	switch os.Args[1] {
	case "write":
		os.Exit(write(os.Args[2:]))
	case "incr":
		os.Exit(incr())
	case "shard":
		os.Exit(shard(os.Args[2:]))
	}
	fmt.Fprintf(os.Stderr, "e2ehelper: unknown mode %q\n", os.Args[1])
	os.Exit(exitUsage)
}

func fail(format string, args ...any) int {
	fmt.Fprintf(os.Stderr, "e2ehelper: "+format+"\n", args...)
	return exitError
}

func token() (uint64, error) {
	tok, err := strconv.ParseUint(os.Getenv("FENCE_TOKEN"), 10, 64)
	if err != nil || tok == 0 {
		return 0, fmt.Errorf("bad $FENCE_TOKEN %q", os.Getenv("FENCE_TOKEN"))
	}
	return tok, nil
}

// writeFileAtomic writes b to path through a temporary file and a rename,
// so that a reader never sees a partial file.
func writeFileAtomic(path string, b []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// Ready is what the ready file holds.
type Ready struct {
	PID   int    `json:"pid"`
	Token uint64 `json:"token"`
}

// Outcome is what the outcome file holds.
type Outcome struct {
	Token    uint64 `json:"token"`
	Result   string `json:"result"`             // oplog.OK, oplog.Stale or oplog.Error
	Accepted uint64 `json:"accepted,omitempty"` // Stale: the token that was accepted
	Err      string `json:"err,omitempty"`
	// Peer is the state of the --peer process just before the write:
	// "running", "stopped" or "gone".
	Peer string `json:"peer,omitempty"`
}

func write(args []string) int {
	fs := flag.NewFlagSet("write", flag.ContinueOnError)
	via := fs.String("via", "", "pg or guard")
	value := fs.String("value", "", "the value to write")
	outcome := fs.String("outcome", "", "file to record the outcome in")
	ready := fs.String("ready", "", "file to write when started")
	goFile := fs.String("go", "", "file to wait for before writing")
	peer := fs.String("peer", "", "PID@START of a process whose state to record just before writing")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	if (*via != "pg" && *via != "guard") || *outcome == "" || fs.NArg() != 0 {
		fmt.Fprintln(os.Stderr, "usage: e2ehelper write --via pg|guard --value V --outcome FILE [--ready FILE] [--go FILE]")
		return exitUsage
	}
	tok, err := token()
	if err != nil {
		return fail("%v", err)
	}
	if *ready != "" {
		b, _ := json.Marshal(Ready{PID: os.Getpid(), Token: tok})
		if err := writeFileAtomic(*ready, b); err != nil {
			return fail("%v", err)
		}
	}
	if *goFile != "" {
		// A test helper may poll: it waits for the test, not for a lock.
		for deadline := time.Now().Add(5 * time.Minute); ; time.Sleep(20 * time.Millisecond) {
			if _, err := os.Stat(*goFile); err == nil {
				break
			}
			if time.Now().After(deadline) {
				return fail("%s never appeared", *goFile)
			}
		}
	}
	out := Outcome{Token: tok, Result: oplog.OK}
	if *peer != "" {
		var id proc.ID
		if _, err := fmt.Sscanf(*peer, "%d@%d", &id.PID, &id.Start); err != nil {
			return fail("bad --peer %q", *peer)
		}
		out.Peer = proc.Check(id).String()
	}
	code := exitOK
	if *via == "pg" {
		err = pgWrite(tok, *value)
	} else {
		err = guardWrite(tok, *value)
	}
	var se *guard.StaleError
	switch {
	case errors.As(err, &se):
		out.Result, out.Accepted, code = oplog.Stale, se.Accepted, exitStale
	case err != nil:
		out.Result, out.Err, code = oplog.Error, err.Error(), exitError
	}
	b, _ := json.Marshal(out)
	if err := writeFileAtomic(*outcome, b); err != nil {
		return fail("%v", err)
	}
	return code
}

// pgWrite runs sqlguard's fenced UPDATE of row 42 of "jobs":
// UPDATE "jobs" SET "value" = $1, "fence" = $2 WHERE "id" = $3 AND "fence" <= $2.
func pgWrite(tok uint64, value string) error {
	db, err := sql.Open("pgx", os.Getenv("E2E_PG_DSN"))
	if err != nil {
		return err
	}
	defer db.Close()
	t, err := sqlguard.New(db, sqlguard.Postgres, "jobs", sqlguard.WithUpdatedAtColumn(""))
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	return t.UpdateColumns(ctx, 42, tok, map[string]any{"value": value})
}

// guardWrite runs `fence guard put job-42/result --token N VALUE` and maps
// its exit 77 to a *guard.StaleError.
func guardWrite(tok uint64, value string) error {
	cmd := exec.Command(os.Getenv("E2E_FENCE"), "guard", "put", "job-42/result", "--token", strconv.FormatUint(tok, 10), value)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.ExitCode() == exitStale {
		return &guard.StaleError{Key: "job-42/result", Token: tok}
	}
	return err
}

// holder is one run of the counter's read-modify-write loop.
type holder struct {
	client int
	tok    uint64
	log    *oplog.Writer
	db     *sql.DB
	table  *sqlguard.Table
	seq    int
}

func incr() int {
	tok, err := token()
	if err != nil {
		return fail("%v", err)
	}
	client, _ := strconv.Atoi(os.Getenv("E2E_CLIENT"))
	maxIncr, err := strconv.Atoi(os.Getenv("E2E_MAX"))
	if err != nil || maxIncr < 1 {
		return fail("bad $E2E_MAX %q", os.Getenv("E2E_MAX"))
	}
	stop := os.Getenv("E2E_STOP")
	stopped := func() bool { _, err := os.Stat(stop); return stop != "" && err == nil }
	if stopped() {
		return exitOK
	}
	log, err := oplog.Create(filepath.Join(os.Getenv("E2E_LOG_DIR"), fmt.Sprintf("c%02d-p%d-t%d.jsonl", client, os.Getpid(), tok)))
	if err != nil {
		return fail("%v", err)
	}
	defer log.Close()
	db, err := sql.Open("pgx", os.Getenv("E2E_PG_DSN"))
	if err != nil {
		return fail("%v", err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	table, err := sqlguard.New(db, sqlguard.Postgres, "counter", sqlguard.WithUpdatedAtColumn(""))
	if err != nil {
		return fail("%v", err)
	}
	h := &holder{client: client, tok: tok, log: log, db: db, table: table}
	rng := rand.New(rand.NewPCG(uint64(os.Getpid()), tok))

	// Claim: from here on every older holder's write is refused, so the
	// value read next is the value every later write of ours builds on.
	if code := h.write(oplog.Claim, 0, 0); code != exitOK {
		return code
	}
	cur, fence, code := h.read()
	if code != exitOK {
		return code
	}
	if fence != tok {
		return exitStale // a newer holder claimed the row already
	}
	// Think time between the read and the first write: the window in which
	// the nemesis test lets a stale holder write.
	time.Sleep(time.Duration(20+rng.IntN(40)) * time.Millisecond)
	n := 1 + rng.IntN(maxIncr)
	for i := range n {
		if stopped() {
			return exitOK
		}
		time.Sleep(time.Duration(1+rng.IntN(5)) * time.Millisecond)
		if code := h.write(oplog.Incr, cur, cur+1); code != exitOK {
			return code
		}
		cur++
		if i%4 == 3 {
			if _, _, code := h.read(); code != exitOK {
				return code
			}
		}
	}
	return exitOK
}

func (h *holder) rec(phase, kind string) oplog.Record {
	return oplog.Record{ID: fmt.Sprintf("%d.%d", os.Getpid(), h.seq), Client: h.client, PID: os.Getpid(),
		Phase: phase, Kind: kind, Token: h.tok, T: int64(clock.Now())}
}

// write runs a claim (the holder column and the fence) or an increment
// (the value, from → to, and the fence), logging its call and return.
func (h *holder) write(kind string, from, to int64) int {
	h.seq++
	c := h.rec(oplog.Call, kind)
	c.From, c.To = from, to
	if err := h.log.Append(c); err != nil {
		return fail("%v", err)
	}
	set := map[string]any{"value": to}
	if kind == oplog.Claim {
		set = map[string]any{"holder": fmt.Sprintf("client %d pid %d", h.client, os.Getpid())}
	}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	err := h.table.UpdateColumns(ctx, 1, h.tok, set)
	cancel()
	r := h.rec(oplog.Ret, kind)
	r.From, r.To = from, to
	var se *guard.StaleError
	code := exitOK
	switch {
	case err == nil:
		r.Result = oplog.OK
	case errors.As(err, &se):
		r.Result, r.Fence, code = oplog.Stale, se.Accepted, exitStale
	default:
		r.Result, r.Err, code = oplog.Error, err.Error(), exitError
	}
	if err := h.log.Append(r); err != nil {
		return fail("%v", err)
	}
	return code
}

// read reads the value and the fence of the counter's row.
func (h *holder) read() (value int64, fence uint64, code int) {
	h.seq++
	if err := h.log.Append(h.rec(oplog.Call, oplog.Read)); err != nil {
		return 0, 0, fail("%v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	err := h.db.QueryRowContext(ctx, `SELECT "value", "fence" FROM "counter" WHERE "id" = 1`).Scan(&value, &fence)
	cancel()
	r := h.rec(oplog.Ret, oplog.Read)
	if err != nil {
		r.Result, r.Err = oplog.Error, err.Error()
		code = exitError
	} else {
		r.Result, r.Value, r.Fence = oplog.OK, value, fence
	}
	if err := h.log.Append(r); err != nil {
		return 0, 0, fail("%v", err)
	}
	return value, fence, code
}

// ShardStart is a shard command's start record.
type ShardStart struct {
	Member string         `json:"member"`
	ID     proc.ID        `json:"id"`
	T      int64          `json:"t"` // clock.Boot at the start
	Tokens map[int]uint64 `json:"tokens"`
}

// ShardWrites are the outcomes of a shard command's writes: by shard,
// oplog.OK, oplog.Stale or an error.
type ShardWrites map[int]string

func shard(args []string) int {
	t0 := clock.Now()
	fs := flag.NewFlagSet("shard", flag.ContinueOnError)
	dir := fs.String("log", "", "directory of the records")
	goFile := fs.String("go", "", "file to wait for before writing again")
	if err := fs.Parse(args); err != nil || *dir == "" {
		return exitUsage
	}
	st, err := proc.ReadStat(os.Getpid())
	if err != nil {
		return fail("%v", err)
	}
	rec := ShardStart{Member: os.Getenv("FENCE_MEMBER"), ID: st.ID(), T: int64(t0), Tokens: map[int]uint64{}}
	for _, kv := range strings.Split(os.Getenv("FENCE_SHARD_TOKENS"), ",") {
		k, v, ok := strings.Cut(kv, ":")
		n, err1 := strconv.Atoi(k)
		tok, err2 := strconv.ParseUint(v, 10, 64)
		if !ok || err1 != nil || err2 != nil {
			return fail("bad $FENCE_SHARD_TOKENS %q", os.Getenv("FENCE_SHARD_TOKENS"))
		}
		rec.Tokens[n] = tok
	}
	base := filepath.Join(*dir, fmt.Sprintf("%s-%d", rec.Member, os.Getpid()))
	b, _ := json.Marshal(rec)
	if err := writeFileAtomic(base+".start", b); err != nil {
		return fail("%v", err)
	}
	g, closeGuard, err := openGuard()
	if err != nil {
		return fail("%v", err)
	}
	defer closeGuard()
	group := os.Getenv("FENCE_GROUP")
	writeAll := func(suffix string) error {
		out := ShardWrites{}
		for n, tok := range rec.Tokens {
			ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
			err := g.Put(ctx, fmt.Sprintf("%s/shard/%d/data", group, n), tok, []byte(rec.Member))
			cancel()
			var se *guard.StaleError
			switch {
			case err == nil:
				out[n] = oplog.OK
			case errors.As(err, &se):
				out[n] = oplog.Stale
			default:
				out[n] = err.Error()
			}
		}
		b, _ := json.Marshal(out)
		return writeFileAtomic(base+suffix, b)
	}
	if err := writeAll(".first"); err != nil {
		return fail("%v", err)
	}
	if *goFile != "" {
		for {
			if _, err := os.Stat(*goFile); err == nil {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err := writeAll(".late"); err != nil {
			return fail("%v", err)
		}
	}
	for {
		time.Sleep(time.Hour) // until a signal ends it
	}
}

// openGuard opens the guard store of fence's coordinator.
func openGuard() (guard.Guard, func(), error) {
	if d := os.Getenv("FENCE_STATE_DIR"); d != "" {
		g, err := localstore.Open(d)
		return g, func() {}, err
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: strings.Split(os.Getenv("FENCE_ENDPOINTS"), ","), DialTimeout: 5 * time.Second})
	if err != nil {
		return nil, nil, err
	}
	return etcdstore.New(cli, os.Getenv("FENCE_PREFIX")), func() { cli.Close() }, nil
}
