package localstore

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/sys/unix"

	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/history"
	"github.com/fence-dev/fence/pkg/history/historytest"
)

const envDir = "FENCE_HISTORY_LOCALSTORE_DIR"

func TestMain(m *testing.M) {
	if dir := os.Getenv(envDir); dir != "" {
		s, err := openStore(dir)
		if err != nil {
			os.Stderr.WriteString(err.Error() + "\n")
			os.Exit(1)
		}
		os.Exit(historytest.WriterMain(s))
	}
	goleak.VerifyTestMain(m)
}

func storage(t *testing.T) historytest.Opener {
	dir := filepath.Join(t.TempDir(), "state")
	return func(opts ...history.Option) history.Store {
		s, err := openStore(dir, opts...)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
}

func TestConformance(t *testing.T) {
	historytest.Run(t, historytest.Harness{
		Storage: storage,
		Stored: func(t *testing.T, open historytest.Opener, lock string) int {
			b, err := os.ReadFile(open().(*store).File(lock))
			if err != nil {
				t.Fatal(err)
			}
			return bytes.Count(b, []byte{'\n'})
		},
		Slack: slackOf,
		Spawn: func(t *testing.T, open historytest.Opener, lock, id string, n int) *exec.Cmd {
			dir := filepath.Dir(open().(*store).Dir())
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), envDir+"="+dir)
			cmd.Env = append(cmd.Env, historytest.WriterEnv(lock, id, n)...)
			return cmd
		},
	})
}

func open(t *testing.T, opts ...history.Option) *store {
	t.Helper()
	return storage(t)(opts...).(*store)
}

func record(t *testing.T, s *store, lock string, token uint64) {
	t.Helper()
	if err := s.Record(context.Background(), history.Event{Lock: lock, Kind: history.Acquired, Token: token}); err != nil {
		t.Fatal(err)
	}
}

func TestPermissions(t *testing.T) {
	old := unix.Umask(0)
	defer unix.Umask(old)
	s := open(t)
	record(t, s, "k", 1)
	for path, want := range map[string]os.FileMode{
		filepath.Dir(s.Dir()):            0o700,
		s.Dir():                          0o700,
		s.File("k"):                      0o600,
		filepath.Join(s.Dir(), "k.lock"): 0o600,
	} {
		fi, err := os.Lstat(path)
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode().Perm(); got != want {
			t.Errorf("%s: mode %v, want %v", path, got, want)
		}
	}
}

func TestFileNames(t *testing.T) {
	s := open(t)
	for name, want := range map[string]string{
		"a":                      "a.jsonl",
		"a/b":                    "a%2Fb.jsonl",
		".hidden":                "%2Ehidden.jsonl",
		"x.y":                    "x.y.jsonl",
		"%":                      "%25.jsonl",
		strings.Repeat("/", 100): "~",
		// The layout on disk: hashed beyond 200 bytes of escape.
		strings.Repeat("/", 66): strings.Repeat("%2F", 66) + ".jsonl",
		strings.Repeat("/", 67): "~3eb1349aab9dc074e2028d6801ffe27e5de46b30e87a4e66e5fbb0b764f514e1.jsonl",
	} {
		if got := filepath.Base(s.File(name)); got != want && !(want == "~" && strings.HasPrefix(got, "~")) {
			t.Errorf("File(%q) = %s, want %s", name, got, want)
		}
	}
}

// failsClosed checks that reads and writes of lock fail with
// ErrUnavailable, naming the file, and leave it as it is.
func failsClosed(t *testing.T, s *store, lock string) {
	t.Helper()
	path := s.File(lock)
	before, _ := os.ReadFile(path)
	ctx := context.Background()
	if _, err := s.History(ctx, lock, 0); !errors.Is(err, coord.ErrUnavailable) || !strings.Contains(err.Error(), path) {
		t.Errorf("History = %v, want ErrUnavailable naming %s", err, path)
	}
	if _, err := s.Since(ctx, lock, 0); !errors.Is(err, coord.ErrUnavailable) {
		t.Errorf("Since = %v, want ErrUnavailable", err)
	}
	err := s.Record(ctx, history.Event{Lock: lock, Kind: history.Acquired, Token: 99})
	if !errors.Is(err, coord.ErrUnavailable) {
		t.Errorf("Record = %v, want ErrUnavailable", err)
	}
	if err != nil && strings.Contains(err.Error(), "\n") {
		t.Errorf("error spans lines: %q", err)
	}
	after, _ := os.ReadFile(path)
	if !bytes.Equal(before, after) {
		t.Errorf("the file changed:\n%s\n----\n%s", before, after)
	}
}

func TestCorruptFailsClosed(t *testing.T) {
	cases := map[string]func(t *testing.T, path string){
		"garbage line": func(t *testing.T, path string) { insertLine(t, path, 1, "{not json") },
		"other lock": func(t *testing.T, path string) {
			insertLine(t, path, 2, `{"seq":50,"time":"2030-01-01T00:00:00Z","lock":"other","kind":"acquired"}`)
		},
		"sequence goes back": func(t *testing.T, path string) {
			insertLine(t, path, 2, `{"seq":1,"time":"2030-01-01T00:00:00Z","lock":"c","kind":"acquired"}`)
		},
		"no time":    func(t *testing.T, path string) { insertLine(t, path, 3, `{"seq":9,"lock":"c","kind":"acquired"}`) },
		"empty line": func(t *testing.T, path string) { insertLine(t, path, 1, "") },
		"symlink": func(t *testing.T, path string) {
			other := path + ".real"
			if err := os.Rename(path, other); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(other, path); err != nil {
				t.Fatal(err)
			}
		},
		"open to others": func(t *testing.T, path string) {
			if err := os.Chmod(path, 0o644); err != nil {
				t.Fatal(err)
			}
		},
		"directory": func(t *testing.T, path string) {
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
			if err := os.Mkdir(path, 0o700); err != nil {
				t.Fatal(err)
			}
		},
	}
	for name, damage := range cases {
		t.Run(name, func(t *testing.T) {
			s := open(t)
			for i := uint64(1); i <= 4; i++ {
				record(t, s, "c", i)
			}
			damage(t, s.File("c"))
			failsClosed(t, s, "c")
			// A fresh process (no cached state) fails the same way.
			s2, err := openStore(filepath.Dir(s.Dir()))
			if err != nil {
				t.Fatal(err)
			}
			failsClosed(t, s2, "c")
			// Other locks are not affected.
			record(t, s, "fine", 1)
		})
	}
}

// TestCorruptAfterCachedWrites damages a file behind a store that has
// validated it before: the damaged part is checked at the next write.
func TestCorruptAfterCachedWrites(t *testing.T) {
	s := open(t)
	record(t, s, "c", 1)
	f, err := os.OpenFile(s.File("c"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("garbage\n")
	f.Close()
	failsClosed(t, s, "c")
}

func insertLine(t *testing.T, path string, at int, line string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(string(b), "\n")
	lines = append(lines[:at], append([]string{line + "\n"}, lines[at:]...)...)
	if err := os.WriteFile(path, []byte(strings.Join(lines, "")), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestTornTail: an append cut short by a crash leaves a line without its
// newline. Readers ignore it; the next write cuts it off and goes on.
func TestTornTail(t *testing.T) {
	s := open(t)
	record(t, s, "t", 1)
	record(t, s, "t", 2)
	f, err := os.OpenFile(s.File("t"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(`{"seq":3,"time":"2030-01-01T00:00:00Z","lock":"t","ki`)
	f.Close()
	fresh, err := openStore(filepath.Dir(s.Dir()))
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range []*store{s, fresh} {
		evs, err := st.History(context.Background(), "t", 0)
		if err != nil || len(evs) != 2 {
			t.Fatalf("History with a torn tail = %v, %v", evs, err)
		}
	}
	record(t, fresh, "t", 3)
	ents, err := s.Since(context.Background(), "t", 0)
	if err != nil || len(ents) != 3 || ents[2].Seq != 3 || ents[2].Event.Token != 3 {
		t.Fatalf("after the repair: %+v, %v", ents, err)
	}
	b, _ := os.ReadFile(s.File("t"))
	if bytes.Count(b, []byte{'\n'}) != 3 || !bytes.HasSuffix(b, []byte("}\n")) {
		t.Fatalf("file after the repair:\n%s", b)
	}
}

// TestCompactionKeepsFile: a compaction replaces the file atomically, leaves
// no temporary file, and a store that had cached the old file notices.
func TestCompactionKeepsFile(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	a, err := openStore(dir, historytest.WithMaxEvents(8))
	if err != nil {
		t.Fatal(err)
	}
	b, err := openStore(dir, historytest.WithMaxEvents(8))
	if err != nil {
		t.Fatal(err)
	}
	for i := uint64(1); i <= 40; i++ {
		s := a
		if i%3 == 0 {
			s = b
		}
		record(t, s, "k", i)
	}
	ents, err := b.Since(context.Background(), "k", 0)
	if err != nil || len(ents) != 8 || ents[0].Seq != 33 || ents[7].Seq != 40 {
		t.Fatalf("Since = %+v, %v", ents, err)
	}
	names, _ := filepath.Glob(filepath.Join(a.Dir(), ".tmp-*"))
	if len(names) != 0 {
		t.Fatalf("temporary files left: %v", names)
	}
}

func TestOpenRefusesSymlinkDir(t *testing.T) {
	state := t.TempDir()
	if err := os.Symlink(t.TempDir(), filepath.Join(state, dirName)); err != nil {
		t.Fatal(err)
	}
	if _, err := openStore(state); !errors.Is(err, coord.ErrUnavailable) {
		t.Fatalf("Open with a symlinked history dir = %v", err)
	}
	if _, err := openStore(""); !errors.Is(err, coord.ErrInvalid) {
		t.Fatalf("openStore(\"\") = %v", err)
	}
}

func TestCanceledContext(t *testing.T) {
	s := open(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := s.Record(ctx, history.Event{Lock: "x", Kind: history.Acquired})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Record with a canceled context = %v", err)
	}
	// A writer waiting for the lock file gives up when its context ends.
	unlock, err := s.lock(context.Background(), fileBase("x"))
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	ctx, cancel = context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := s.Record(ctx, history.Event{Lock: "x", Kind: history.Acquired}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Record against a held lock file = %v", err)
	}
}

// Dir returns the store's directory (<state-dir>/history).
func (s *store) Dir() string { return s.dir }

// openStore is Open with the concrete type.
func openStore(stateDir string, opts ...history.Option) (*store, error) {
	s, err := Open(stateDir, opts...)
	if err != nil {
		return nil, err
	}
	return s.(*store), nil
}
