package auto_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fence-dev/fence/internal/etcdtest"
	"github.com/fence-dev/fence/internal/history/auto"
	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/coord/etcd"
	"github.com/fence-dev/fence/pkg/coord/local"
	"github.com/fence-dev/fence/pkg/coord/postgres"
	"github.com/fence-dev/fence/pkg/guard/sqlguard/pgtest"
	"github.com/fence-dev/fence/pkg/history"
	"github.com/fence-dev/fence/pkg/history/etcdstore"
	"github.com/fence-dev/fence/pkg/history/localstore"
	"github.com/fence-dev/fence/pkg/history/pgstore"
)

// roundTrip acquires and releases through auto.Wrap(c) and reads the events
// back through a second, independent store of the same kind.
func roundTrip(t *testing.T, c coord.Coordinator, want history.Store) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := auto.Wrap(c)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if again, err := auto.Wrap(r); err != nil || again != r {
		t.Fatalf("Wrap(Recorder) = %v, %v; want the same Recorder", again, err)
	}
	l, err := r.Acquire(ctx, "auto", coord.AcquireOptions{TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Release(ctx, "auto", l.ID); err != nil {
		t.Fatal(err)
	}
	evs, err := want.History(ctx, "auto", 0)
	if err != nil || len(evs) != 2 || evs[0].Kind != history.Acquired || evs[1].Kind != history.Released {
		t.Fatalf("history through another store: %+v, %v", evs, err)
	}
}

func TestLocal(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	c, err := local.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	s, err := localstore.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	roundTrip(t, c, s)
}

func TestEtcd(t *testing.T) {
	srv := etcdtest.Start(t)
	c, err := etcd.New(context.Background(), srv.Endpoints(), etcd.WithPrefix("/p/"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := etcdstore.New(srv.Client(t), "/p/")
	if err != nil {
		t.Fatal(err)
	}
	roundTrip(t, c, s)
}

func TestPostgres(t *testing.T) {
	srv := pgtest.Start(t)
	url := srv.URL(srv.CreateDatabase(t))
	openPG := func() coord.Coordinator {
		c, err := postgres.Open(context.Background(), url)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	other := openPG()
	defer other.Close()
	s, err := pgstore.New(other)
	if err != nil {
		t.Fatal(err)
	}
	roundTrip(t, openPG(), s)
}

type other struct{ coord.Coordinator }

func (other) Describe() string { return "other" }

func TestOtherRefused(t *testing.T) {
	if _, err := auto.Wrap(other{}); !errors.Is(err, coord.ErrInvalid) {
		t.Fatalf("Wrap(unknown backend) = %v", err)
	}
}

// TestBrokenLocalHistory: a history directory that cannot be used does not
// stop leases; reading the history says why.
func TestBrokenLocalHistory(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	c, err := local.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(t.TempDir(), filepath.Join(dir, "history")); err != nil {
		t.Fatal(err)
	}
	r, err := auto.Wrap(c, history.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ctx := context.Background()
	l, err := r.Acquire(ctx, "k", coord.AcquireOptions{TTL: 10 * time.Second})
	if err != nil {
		t.Fatalf("Acquire with a broken history: %v", err)
	}
	if err := r.Release(ctx, "k", l.ID); err != nil {
		t.Fatalf("Release with a broken history: %v", err)
	}
	if _, err := r.History(ctx, "k", 0); !errors.Is(err, coord.ErrUnavailable) || !strings.Contains(err.Error(), "not a directory") {
		t.Fatalf("History = %v, want the reason", err)
	}
}
