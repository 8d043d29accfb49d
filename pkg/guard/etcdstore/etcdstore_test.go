package etcdstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fence-dev/fence/internal/etcdtest"
	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/guard"
	"github.com/fence-dev/fence/pkg/guard/guardtest"
	"github.com/fence-dev/fence/pkg/guard/internal/check"
)

var prefixes atomic.Int64

// newPrefix gives each subtest its own key space on the shared server.
func newPrefix() string { return fmt.Sprintf("/t%d/", prefixes.Add(1)) }

func TestConformance(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := srv.Client(t)
	guardtest.Run(t, func(t *testing.T) guard.Guard { return newStore(cli, newPrefix()) })
}

func TestLayout(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := srv.Client(t)
	ctx := context.Background()

	s := newStore(cli, "")
	if got := s.Key("a/b c"); got != "/fence/guards/a%2Fb%20c" {
		t.Errorf("Key = %q", got)
	}
	if err := s.Put(ctx, "job-42", 42, []byte("hi")); err != nil {
		t.Fatal(err)
	}
	resp, err := cli.Get(ctx, "/fence/guards/job-42")
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("raw get: %v %v", resp, err)
	}
	raw := string(resp.Kvs[0].Value)
	if !strings.HasPrefix(raw, `{"token":"00000000000000000042","data":"aGk=","updated_at":"`) {
		t.Errorf("stored value %s", raw)
	}
	// Keys of one store do not leak into another prefix.
	if _, err := newStore(cli, "/other/").Get(ctx, "job-42"); !errors.Is(err, guard.ErrNotFound) {
		t.Errorf("other prefix sees the key: %v", err)
	}
}

// TestTokenOrderingAcrossDigits checks the byte-wise comparison where the
// number of significant digits changes.
func TestTokenOrderingAcrossDigits(t *testing.T) {
	srv := etcdtest.Start(t)
	s := newStore(srv.Client(t), newPrefix())
	ctx := context.Background()
	for _, tok := range []uint64{9, 10, 99, 100, 1 << 32, 1<<32 + 1, check.MaxToken} {
		if err := s.Put(ctx, "k", tok, nil); err != nil {
			t.Fatalf("Put(%d): %v", tok, err)
		}
		if err := s.Put(ctx, "k", tok, nil); err != nil {
			t.Fatalf("Put(%d) again: %v", tok, err)
		}
		var se *guard.StaleError
		if err := s.Put(ctx, "k", tok-1, nil); !errors.As(err, &se) || se.Accepted != tok {
			t.Fatalf("Put(%d) after %d = %v, want stale", tok-1, tok, err)
		}
	}
}

// TestForeignValueFailsClosed writes values that fence did not write. Those
// that do not start with a token field are never overwritten; those that do
// (the last two cases) are overwritten only by a token at least as large as
// theirs, as fencing requires; a smaller one is refused with
// ErrUnavailable, not as stale, because the stored value cannot be decoded.
func TestForeignValueFailsClosed(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := srv.Client(t)
	ctx := context.Background()
	s := newStore(cli, newPrefix())
	for i, raw := range []string{
		"",
		"plain text",
		`{"token":"`,
		`{"token":"zzz"}`,
		`{"data":"","token":"00000000000000000001"}`,
		"\x00\x01",
		`{"token":"00000000000000000005"`,
		`{"token":"00000000000000000005","data":"","updated_at":"2024-01-01T00:00:00Z","x":1}`,
	} {
		token := uint64(99)
		if strings.HasPrefix(raw, `{"token":"0`) {
			token = 3
		}
		key := fmt.Sprint("k", i)
		if _, err := cli.Put(ctx, s.Key(key), raw); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Get(ctx, key); !errors.Is(err, coord.ErrUnavailable) {
			t.Errorf("Get over %q = %v, want ErrUnavailable", raw, err)
		}
		if err := s.Put(ctx, key, token, []byte("x")); !errors.Is(err, coord.ErrUnavailable) {
			t.Errorf("Put over %q = %v, want ErrUnavailable", raw, err)
		}
		resp, err := cli.Get(ctx, s.Key(key))
		if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != raw {
			t.Errorf("value %q was overwritten: %v %v", raw, resp, err)
		}
	}
}

func TestUnavailable(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := srv.Client(t)
	s := newStore(cli, newPrefix())
	if err := s.Put(context.Background(), "k", 1, nil); err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	err := s.Put(ctx, "k", 2, nil)
	if err == nil || errors.Is(err, guard.ErrStale) {
		t.Fatalf("Put on a stopped server = %v", err)
	}
	if _, err := s.Get(ctx, "k"); err == nil {
		t.Fatal("Get on a stopped server succeeded")
	}
	srv.Restart(t)
	ctx2, cancel2 := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel2()
	if err := s.Put(ctx2, "k", 2, []byte("after restart")); err != nil {
		t.Fatal(err)
	}
}

// TestDocRecipe runs the etcd recipe of docs/fencing.md as written there.
func TestDocRecipe(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := srv.Client(t)
	ctx := context.Background()
	write := func(token uint64, result string) bool {
		// --- from docs/fencing.md ---
		fenceKey, dataKey := "/app/job-42/fence", "/app/job-42/result"
		pad := func(t uint64) string { return fmt.Sprintf("%020d", t) }
		resp, err := cli.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(fenceKey), "=", 0)).
			Then(clientv3.OpPut(fenceKey, pad(token)), clientv3.OpPut(dataKey, result)).
			Else(clientv3.OpTxn(
				[]clientv3.Cmp{clientv3.Compare(clientv3.Value(fenceKey), "<", pad(token+1))},
				[]clientv3.Op{clientv3.OpPut(fenceKey, pad(token)), clientv3.OpPut(dataKey, result)},
				[]clientv3.Op{clientv3.OpGet(fenceKey)}, // refused: the accepted token
			)).Commit()
		accepted := err == nil && (resp.Succeeded || resp.Responses[0].GetResponseTxn().Succeeded)
		// --- end ---
		if err != nil {
			t.Fatal(err)
		}
		return accepted
	}
	for _, c := range []struct {
		token uint64
		want  bool
	}{{5, true}, {5, true}, {3, false}, {10, true}, {9, false}, {100, true}} {
		if got := write(c.token, fmt.Sprint("r", c.token)); got != c.want {
			t.Errorf("write(%d) accepted = %v, want %v", c.token, got, c.want)
		}
	}
	resp, err := cli.Get(ctx, "/app/job-42/result")
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "r100" {
		t.Fatalf("result = %v, %v", resp, err)
	}
}

// TestPrefixWithoutSlash: "/p" is "/p/", as for the coordinator: the
// guards of one namespace are at one place whichever way its prefix is
// written (not at "/pguards/...").
func TestPrefixWithoutSlash(t *testing.T) {
	for _, p := range []string{"/p", "/p/"} {
		if k := newStore(nil, p).Key("k"); k != "/p/guards/k" {
			t.Errorf("prefix %q: key %q, want /p/guards/k", p, k)
		}
	}
	if k := newStore(nil, "").Key("k"); k != "/fence/guards/k" {
		t.Errorf("default prefix: key %q", k)
	}
}

// newStore is New with the concrete type.
func newStore(cli *clientv3.Client, prefix string) *store { return New(cli, prefix).(*store) }
