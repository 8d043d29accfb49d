package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/coord/coordtest"
	"github.com/fence-dev/fence/pkg/coord/postgres"
	"github.com/fence-dev/fence/pkg/guard/sqlguard/pgtest"
)

const envURL = "FENCE_CONFORMANCE_POSTGRES"

func TestMain(m *testing.M) {
	if coordtest.IsHelper() {
		os.Exit(coordtest.HelperMain(func() (coord.Coordinator, error) {
			return open(os.Getenv(envURL))
		}))
	}
	os.Exit(m.Run())
}

func open(url string) (coord.Coordinator, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return postgres.Open(ctx, url)
}

// TestConformance runs the coordtest suite against a real PostgreSQL.
func TestConformance(t *testing.T) {
	srv := pgtest.Start(t)
	db := srv.CreateDatabase(t)
	url := srv.URL(db)
	coordtest.Run(t, coordtest.Harness{
		New: func(t testing.TB) coord.Coordinator {
			c, err := open(url)
			if err != nil {
				t.Fatalf("postgres.Open: %v", err)
			}
			return c
		},
		Restart:  srv.Restart,
		ShortTTL: 500 * time.Millisecond,
		Spawn: func(t testing.TB, args ...string) *exec.Cmd {
			cmd := coordtest.HelperCommand(args...)
			cmd.Env = append(cmd.Env, fmt.Sprintf("%s=%s", envURL, url))
			return cmd
		},
	})
}

// counter is a pgx tracer that counts queries.
type counter struct{ n atomic.Int64 }

func (k *counter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	k.n.Add(1)
	return ctx
}
func (k *counter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TestIdleWaiterSendsNothing: while the holder renews, a queued waiter
// sends no query (it follows the renewals by NOTIFY); it still gets the
// lock as soon as the holder releases it.
func TestIdleWaiterSendsNothing(t *testing.T) {
	srv := pgtest.Start(t)
	url := srv.URL(srv.CreateDatabase(t))
	ctx := context.Background()
	holder, err := open(url)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	var k counter
	waiter, err := postgres.Open(ctx, url, postgres.WithTracer(&k))
	if err != nil {
		t.Fatal(err)
	}
	defer waiter.Close()
	const ttl = 600 * time.Millisecond
	l, err := holder.Acquire(ctx, "idle", coord.AcquireOptions{TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	queued := make(chan struct{})
	got := make(chan error, 1)
	go func() {
		_, err := waiter.Acquire(ctx, "idle", coord.AcquireOptions{TTL: ttl, Wait: coord.WaitForever, OnWait: func(coord.LockInfo) { close(queued) }})
		got <- err
	}()
	<-queued
	time.Sleep(50 * time.Millisecond)
	before := k.n.Load()
	renewals := 0
	for end := time.Now().Add(5 * ttl); time.Now().Before(end); renewals++ {
		time.Sleep(ttl / 3)
		if _, err := holder.Renew(ctx, "idle", l.ID); err != nil {
			t.Fatalf("Renew: %v", err)
		}
	}
	time.Sleep(ttl / 2) // past the TTL of the last renewal seen, were it not renewed
	if n := k.n.Load() - before; n != 0 {
		t.Errorf("the idle waiter sent %d queries during %d renewals over %v; want 0", n, renewals, 5*ttl)
	}
	select {
	case err := <-got:
		t.Fatalf("waiter returned (%v) while the lease was renewed", err)
	default:
	}
	if err := holder.Release(ctx, "idle", l.ID); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("waiter after the release: %v", err)
	}
	t.Logf("%d renewals, 0 queries from the waiter", renewals)
}

// TestTokenCeiling: the token after 2^63-2 is 2^63-1, and then the lock is
// refused, never wrapped.
func TestTokenCeiling(t *testing.T) {
	srv := pgtest.Start(t)
	name := srv.CreateDatabase(t)
	c, err := open(srv.URL(name))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	l, err := c.Acquire(ctx, "ceil", coord.AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_ = c.Release(ctx, "ceil", l.ID)
	if _, err := srv.Open(t, name).Exec("UPDATE fence.locks SET last_token = $1 WHERE name = 'ceil'", int64(coord.MaxToken-1)); err != nil {
		t.Fatal(err)
	}
	l, err = c.Acquire(ctx, "ceil", coord.AcquireOptions{})
	if err != nil || l.Token != coord.MaxToken {
		t.Fatalf("Acquire at the ceiling = %v, %v; want token %d", l, err, uint64(coord.MaxToken))
	}
	_ = c.Release(ctx, "ceil", l.ID)
	if l, err := c.Acquire(ctx, "ceil", coord.AcquireOptions{}); !errors.Is(err, coord.ErrUnavailable) || !strings.Contains(err.Error(), "never wrap") {
		t.Fatalf("Acquire past the ceiling = %v, %v; want ErrUnavailable saying tokens never wrap", l, err)
	}
}

// TestSchemaRefused: a role that may not create the schema is told to have
// the SQL run (ErrInvalid: exit 125); once it is, the role works.
func TestSchemaRefused(t *testing.T) {
	srv := pgtest.Start(t)
	name := srv.CreateDatabase(t)
	db := srv.Open(t, name)
	for _, q := range []string{"CREATE ROLE app LOGIN", "REVOKE CREATE ON DATABASE " + name + " FROM PUBLIC", "GRANT CONNECT ON DATABASE " + name + " TO app"} {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	url := fmt.Sprintf("postgres://app@127.0.0.1:%d/%s?sslmode=disable", srv.Port(), name)
	_, err := open(url)
	if !errors.Is(err, coord.ErrInvalid) || !strings.Contains(err.Error(), "fence postgres schema") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("Open as a role that may not create = %v; want one line of ErrInvalid naming `fence postgres schema`", err)
	}
	if _, err := db.Exec(postgres.SchemaSQL("") + "GRANT USAGE ON SCHEMA fence TO app; GRANT ALL ON ALL TABLES IN SCHEMA fence TO app; GRANT ALL ON ALL SEQUENCES IN SCHEMA fence TO app;"); err != nil {
		t.Fatal(err)
	}
	c, err := open(url)
	if err != nil {
		t.Fatalf("Open once the schema exists: %v", err)
	}
	defer c.Close()
	if _, err := c.Acquire(context.Background(), "x", coord.AcquireOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestSuiteCatchesEarlyTakeover: with a planted bug (a lease taken over
// after half its TTL unrenewed), the suite's expiry cases fail.
func TestSuiteCatchesEarlyTakeover(t *testing.T) {
	if os.Getenv(postgres.PlantEnv) != "" {
		t.Skip("inside a child")
	}
	for _, c := range []string{"ExpiryTakeover", "ExpiryFree"} {
		cmd := exec.Command(os.Args[0], "-test.run", "^TestConformance$/^"+c+"$", "-test.count=1")
		cmd.Env = append(os.Environ(), postgres.PlantEnv+"=early-takeover")
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), "--- FAIL: TestConformance/"+c) {
			t.Errorf("%s with takeover at TTL/2: %v; want the case to fail\n%s", c, err, out)
		}
	}
}

// TestClosed: once closed, every call that would use the pool fails with
// ErrUnavailable saying the coordinator is closed (MapErr; none checks
// first).
func TestClosed(t *testing.T) {
	srv := pgtest.Start(t)
	c, err := open(srv.URL(srv.CreateDatabase(t)))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	l, err := c.Acquire(ctx, "x", coord.AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	calls := map[string]func() error{
		"Acquire":     func() error { _, err := c.Acquire(ctx, "y", coord.AcquireOptions{}); return err },
		"Renew":       func() error { _, err := c.Renew(ctx, "x", l.ID); return err },
		"Inspect":     func() error { _, err := c.Inspect(ctx, "x"); return err },
		"List":        func() error { _, err := c.List(ctx, ""); return err },
		"SetLimit":    func() error { return c.SetLimit(ctx, coord.Limit{Name: "x", Max: 1}) },
		"ClearLimit":  func() error { _, _, err := c.ClearLimit(ctx, "x", false); return err },
		"Limits":      func() error { _, err := c.Limits(ctx); return err },
		"Completion":  func() error { _, _, err := c.Completion(ctx, "x", "k"); return err },
		"Completions": func() error { _, err := c.Completions(ctx, "x"); return err },
		"Forget":      func() error { _, err := c.Forget(ctx, "x", "k"); return err },
		"Attach":      func() error { return c.AttachProcess(ctx, "x", l.ID, coord.ProcessInfo{PIDs: []int{1}}) },
	}
	for name, call := range calls {
		if err := call(); !errors.Is(err, coord.ErrUnavailable) || !strings.Contains(err.Error(), "coordinator closed") {
			t.Errorf("%s after Close = %v; want ErrUnavailable saying the coordinator is closed", name, err)
		}
	}
}
