package etcdstore

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

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
	"go.uber.org/zap"

	"github.com/fence-dev/fence/internal/etcdtest"
	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/history"
	"github.com/fence-dev/fence/pkg/history/historytest"
)

const (
	envEndpoint = "FENCE_HISTORY_ETCD_ENDPOINT"
	envPrefix   = "FENCE_HISTORY_ETCD_PREFIX"
)

func TestMain(m *testing.M) {
	if ep := os.Getenv(envEndpoint); ep != "" {
		cli, err := clientv3.New(clientv3.Config{Endpoints: []string{ep}, DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			os.Stderr.WriteString(err.Error() + "\n")
			os.Exit(1)
		}
		s, err := newStore(cli, os.Getenv(envPrefix))
		if err != nil {
			os.Stderr.WriteString(err.Error() + "\n")
			os.Exit(1)
		}
		code := historytest.WriterMain(s)
		cli.Close()
		os.Exit(code)
	}
	goleak.VerifyTestMain(m)
}

var prefixes atomic.Int64

// newPrefix gives each subtest its own key space on the shared server.
func newPrefix() string { return fmt.Sprintf("/t%d/", prefixes.Add(1)) }

func TestConformance(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := srv.Client(t)
	historytest.Run(t, historytest.Harness{
		Storage: func(t *testing.T) historytest.Opener {
			p := newPrefix()
			return func(opts ...history.Option) history.Store {
				s, err := newStore(cli, p, opts...)
				if err != nil {
					t.Fatal(err)
				}
				return s
			}
		},
		Stored: func(t *testing.T, open historytest.Opener, lock string) int {
			s := open().(*store)
			rng := s.Range(lock)
			resp, err := cli.Get(context.Background(), rng, clientv3.WithPrefix(), clientv3.WithCountOnly())
			if err != nil {
				t.Fatal(err)
			}
			return int(resp.Count)
		},
		Slack:  func(int) int { return 0 },
		Events: suiteEvents,
		Spawn: func(t *testing.T, open historytest.Opener, lock, id string, n int) *exec.Cmd {
			s := open().(*store)
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), envEndpoint+"="+srv.Endpoints()[0], envPrefix+"="+s.prefix)
			cmd.Env = append(cmd.Env, historytest.WriterEnv(lock, id, n)...)
			return cmd
		},
	})
}

func TestLayout(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := srv.Client(t)
	ctx := context.Background()
	s, err := newStore(cli, "", historytest.WithMaxEvents(3))
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Range("a/b c"); got != "/fence/history/a%2Fb%20c/" {
		t.Errorf("Range = %q", got)
	}
	if got := s.HeadKey("a/b c"); got != "/fence/history-heads/a%2Fb%20c" {
		t.Errorf("HeadKey = %q", got)
	}
	for i := uint64(1); i <= 5; i++ {
		if err := s.Record(ctx, history.Event{Lock: "job", Kind: history.Acquired, Token: i, Wait: time.Second}); err != nil {
			t.Fatal(err)
		}
	}
	resp, err := cli.Get(ctx, "/fence/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, kv := range resp.Kvs {
		keys = append(keys, string(kv.Key))
	}
	want := []string{
		"/fence/history-heads/job",
		"/fence/history/job/00000000000000000003",
		"/fence/history/job/00000000000000000004",
		"/fence/history/job/00000000000000000005",
	}
	if strings.Join(keys, " ") != strings.Join(want, " ") {
		t.Fatalf("keys:\n%s\nwant\n%s", strings.Join(keys, "\n"), strings.Join(want, "\n"))
	}
	// The head: the numbers, and the newest lease event with its number.
	if v := string(resp.Kvs[0].Value); !strings.HasPrefix(v, `{"seq":5,"first":3,"lease":{"seq":5,`) ||
		!strings.Contains(v, `"lock":"job","kind":"acquired","token":5,"wait_ns":1000000000}}`) {
		t.Errorf("head = %s", v)
	}
	if v := string(resp.Kvs[3].Value); !strings.Contains(v, `"lock":"job","kind":"acquired","token":5,"wait_ns":1000000000`) {
		t.Errorf("event value = %s", v)
	}
	// The coordinator's key space is untouched: nothing under locks/.
	if r, _ := cli.Get(ctx, "/fence/locks/", clientv3.WithPrefix(), clientv3.WithCountOnly()); r.Count != 0 {
		t.Errorf("%d keys under locks/", r.Count)
	}
}

func TestCorruptFailsClosed(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := srv.Client(t)
	ctx := context.Background()
	cases := map[string]func(s *store) (key, val string){
		"garbage event": func(s *store) (string, string) { return s.key("c", 2), "{not json" },
		"event of another lock": func(s *store) (string, string) {
			return s.key("c", 3), `{"time":"2030-01-01T00:00:00Z","lock":"other","kind":"acquired"}`
		},
		"garbage head":      func(s *store) (string, string) { return s.HeadKey("c"), "nope" },
		"inconsistent head": func(s *store) (string, string) { return s.HeadKey("c"), `{"seq":3,"first":9}` },
		"stray key":         func(s *store) (string, string) { return s.Range("c") + "zzz", `{}` },
	}
	for name, damage := range cases {
		t.Run(name, func(t *testing.T) {
			s, err := newStore(cli, newPrefix())
			if err != nil {
				t.Fatal(err)
			}
			for i := uint64(1); i <= 3; i++ {
				if err := s.Record(ctx, history.Event{Lock: "c", Kind: history.Acquired, Token: i}); err != nil {
					t.Fatal(err)
				}
			}
			k, v := damage(s)
			if _, err := cli.Put(ctx, k, v); err != nil {
				t.Fatal(err)
			}
			before, _ := cli.Get(ctx, s.prefix, clientv3.WithPrefix())
			_, herr := s.History(ctx, "c", 0)
			_, serr := s.Since(ctx, "c", 0)
			rerr := s.Record(ctx, history.Event{Lock: "c", Kind: history.Acquired, Token: 9})
			_, hderr := s.Heads(ctx)
			after, _ := cli.Get(ctx, s.prefix, clientv3.WithPrefix())
			if strings.Contains(name, "head") {
				// The events read fine; the head stops writes and Heads.
				if !errors.Is(rerr, coord.ErrUnavailable) || !errors.Is(hderr, coord.ErrUnavailable) {
					t.Errorf("Record = %v, Heads = %v; want ErrUnavailable", rerr, hderr)
				}
				if herr != nil {
					t.Errorf("History = %v", herr)
				}
			} else {
				if !errors.Is(herr, coord.ErrUnavailable) || !errors.Is(serr, coord.ErrUnavailable) {
					t.Errorf("History = %v, Since = %v; want ErrUnavailable", herr, serr)
				}
			}
			if rerr == nil && after.Header.Revision != before.Header.Revision {
				// A write that went through must not have touched the bad key.
				for _, kv := range after.Kvs {
					if string(kv.Key) == k && string(kv.Value) != v {
						t.Errorf("the bad value at %s was overwritten", k)
					}
				}
			}
		})
	}
}

// TestUnreachable: a stopped server gives ErrUnavailable within the
// context, not a hang.
func TestUnreachable(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := srv.Client(t)
	s, err := newStore(cli, newPrefix())
	if err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	err = s.Record(ctx, history.Event{Lock: "x", Kind: history.Acquired})
	if err == nil || !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, coord.ErrUnavailable) {
		t.Fatalf("Record against a stopped server = %v", err)
	}
}

// TestPrefixWithoutSlash: "/p" is "/p/", as for the coordinator: a lock's
// history is at one place whichever way the prefix is written (not at
// "/phistory/...").
func TestPrefixWithoutSlash(t *testing.T) {
	for _, p := range []string{"/p", "/p/"} {
		s, err := newStore(nil, p)
		if err != nil {
			t.Fatal(err)
		}
		if r, h := s.Range("L"), s.HeadKey("L"); r != "/p/history/L/" || h != "/p/history-heads/L" {
			t.Errorf("prefix %q: range %q, head %q", p, r, h)
		}
	}
}

// newStore is New with the concrete type.
func newStore(cli *clientv3.Client, prefix string, opts ...history.Option) (*store, error) {
	s, err := New(cli, prefix, opts...)
	if err != nil {
		return nil, err
	}
	return s.(*store), nil
}
