package localstore

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"golang.org/x/sys/unix"

	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/guard"
	"github.com/fence-dev/fence/pkg/guard/guardtest"
	"github.com/fence-dev/fence/pkg/guard/internal/check"
)

func TestMain(m *testing.M) {
	if os.Getenv("FENCE_GUARD_HELPER") != "" {
		os.Exit(helper())
	}
	os.Exit(m.Run())
}

func open(t *testing.T) *store {
	t.Helper()
	s, err := openStore(filepath.Join(t.TempDir(), "state"))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestConformance(t *testing.T) {
	guardtest.Run(t, func(t *testing.T) guard.Guard { return open(t) })
}

func TestPermissions(t *testing.T) {
	old := unix.Umask(0)
	defer unix.Umask(old)
	s := open(t)
	if err := s.Put(context.Background(), "k", 1, []byte("v")); err != nil {
		t.Fatal(err)
	}
	check := func(path string, want os.FileMode) {
		t.Helper()
		fi, err := os.Lstat(path)
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode().Perm(); got != want {
			t.Errorf("%s: mode %v, want %v", path, got, want)
		}
	}
	check(filepath.Dir(s.Dir()), 0o700)
	check(s.Dir(), 0o700)
	check(filepath.Join(s.Dir(), "k.json"), 0o600)
	check(filepath.Join(s.Dir(), "k.lock"), 0o600)
	ents, err := os.ReadDir(s.Dir())
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".tmp-") {
			t.Errorf("temp file left behind: %s", e.Name())
		}
	}
}

func TestFileNames(t *testing.T) {
	cases := map[string]string{
		"job-42":   "job-42",
		"a/b":      "a%2Fb",
		".":        "%2E",
		"..":       "%2E.",
		"a.b":      "a.b",
		"%":        "%25",
		"~":        "%7E",
		"a b":      "a%20b",
		"ü":        "%C3%BC",
		"A_z-0.9.": "A_z-0.9.",
	}
	for key, want := range cases {
		if got := fileBase(key); got != want {
			t.Errorf("fileBase(%q) = %q, want %q", key, got, want)
		}
	}
	long := strings.Repeat("/", check.MaxKeyLen)
	if got := fileBase(long); !strings.HasPrefix(got, "~") || len(got) != 65 {
		t.Errorf("fileBase(long) = %q, want ~ and a SHA-256", got)
	}
	// The layout on disk: hashed beyond 200 bytes of escape.
	if got, want := fileBase(strings.Repeat("/", 67)), "~3eb1349aab9dc074e2028d6801ffe27e5de46b30e87a4e66e5fbb0b764f514e1"; got != want {
		t.Errorf("fileBase(67 slashes) = %q, want %q", got, want)
	}
	if got, want := fileBase(strings.Repeat("/", 66)), strings.Repeat("%2F", 66); got != want {
		t.Errorf("fileBase(66 slashes) = %q, want %q", got, want)
	}
	seen := map[string]string{}
	for _, k := range append(guardtest.OddKeys, "a", "A", "a/b", "a%2Fb", "a%2fb") {
		b := fileBase(k)
		if len(b)+len(".json") > 255 {
			t.Errorf("fileBase(%q) is %d bytes", k, len(b))
		}
		if other, dup := seen[b]; dup {
			t.Errorf("keys %q and %q share file %q", k, other, b)
		}
		seen[b] = k
	}
}

func TestCorruptFailsClosed(t *testing.T) {
	ctx := context.Background()
	for name, content := range map[string]string{
		"empty":       "",
		"truncated":   `{"version":1,"key":"k","token":5,"da`,
		"garbage":     "\x00\x01\x02",
		"other key":   `{"version":1,"key":"j","token":5,"data":"","updated_at":"2024-01-01T00:00:00Z"}`,
		"token zero":  `{"version":1,"key":"k","token":0,"data":"","updated_at":"2024-01-01T00:00:00Z"}`,
		"new version": `{"version":2,"key":"k","token":5,"data":"","updated_at":"2024-01-01T00:00:00Z"}`,
		"unknown":     `{"version":1,"key":"k","token":5,"data":"","updated_at":"2024-01-01T00:00:00Z","x":1}`,
		"trailing":    `{"version":1,"key":"k","token":5,"data":"","updated_at":"2024-01-01T00:00:00Z"} {}`,
	} {
		t.Run(name, func(t *testing.T) {
			s := open(t)
			path := filepath.Join(s.Dir(), "k.json")
			if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Get(ctx, "k"); !errors.Is(err, coord.ErrUnavailable) || errors.Is(err, guard.ErrNotFound) {
				t.Errorf("Get = %v, want ErrUnavailable", err)
			}
			err := s.Put(ctx, "k", 99, []byte("new"))
			if !errors.Is(err, coord.ErrUnavailable) {
				t.Errorf("Put = %v, want ErrUnavailable", err)
			}
			if err != nil && strings.Contains(err.Error(), "\n") {
				t.Errorf("error spans lines: %q", err)
			}
			got, _ := os.ReadFile(path)
			if string(got) != content {
				t.Errorf("corrupt file was overwritten: %q", got)
			}
		})
	}
}

func TestSymlinkRefused(t *testing.T) {
	ctx := context.Background()
	s := open(t)
	target := filepath.Join(t.TempDir(), "elsewhere.json")
	if err := os.WriteFile(target, []byte(`{"version":1,"key":"k","token":1,"data":"","updated_at":"2024-01-01T00:00:00Z"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, filepath.Join(s.Dir(), "k.json")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, "k"); !errors.Is(err, coord.ErrUnavailable) {
		t.Errorf("Get through a symlink = %v, want ErrUnavailable", err)
	}
	if err := s.Put(ctx, "k", 5, nil); !errors.Is(err, coord.ErrUnavailable) {
		t.Errorf("Put through a symlink = %v, want ErrUnavailable", err)
	}

	state := t.TempDir()
	if err := os.Symlink(t.TempDir(), filepath.Join(state, dirName)); err != nil {
		t.Fatal(err)
	}
	if _, err := openStore(state); err == nil {
		t.Error("Open accepted a symlinked guards directory")
	}
	if _, err := openStore(""); !errors.Is(err, coord.ErrInvalid) {
		t.Errorf("openStore(\"\") = %v, want ErrInvalid", err)
	}
}

// TestLockWaitHonorsContext holds the key's flock from outside and checks
// that Put waits for it, gives up when its context ends, and goes through
// once the lock is released.
func TestLockWaitHonorsContext(t *testing.T) {
	s := open(t)
	f, err := os.OpenFile(filepath.Join(s.Dir(), "k.lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	err = s.Put(ctx, "k", 1, []byte("late"))
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Put under a held lock = %v, want DeadlineExceeded", err)
	}

	done := make(chan error, 1)
	go func() { done <- s.Put(context.Background(), "k", 2, []byte("waited")) }()
	select {
	case err := <-done:
		t.Fatalf("Put went through while the lock was held: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_UN); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Put did not proceed after the lock was released")
	}
	v, err := s.Get(context.Background(), "k")
	if err != nil || string(v.Data) != "waited" || v.Token != 2 {
		t.Fatalf("Get = %q@%d, %v", v.Data, v.Token, err)
	}
	// The abandoned waiter released its lock: a further write is not blocked.
	ctx, cancel = context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.Put(ctx, "k", 3, nil); err != nil {
		t.Fatal(err)
	}
}

// helperOp is one operation recorded by a helper process, with times on
// CLOCK_MONOTONIC (shared by the processes of one host).
type helperOp struct {
	Client        int    `json:"client"`
	Put           bool   `json:"put"`
	Key           string `json:"key"`
	Token         uint64 `json:"token"`
	Data          string `json:"data"`
	Result        string `json:"result"` // accepted, stale, found, missing, error: ...
	StaleAccepted uint64 `json:"stale_accepted"`
	GotToken      uint64 `json:"got_token"`
	Call          int64  `json:"call"`
	Return        int64  `json:"return"`
}

func monoNow() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}

// helper is the body of a helper process: FENCE_GUARD_HELPER=<client>,
// FENCE_GUARD_STATE=<dir>, FENCE_GUARD_OPS=<n>. It prints one JSON line per
// operation.
func helper() int {
	client, _ := strconv.Atoi(os.Getenv("FENCE_GUARD_HELPER"))
	n, _ := strconv.Atoi(os.Getenv("FENCE_GUARD_OPS"))
	s, err := openStore(os.Getenv("FENCE_GUARD_STATE"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(uint64(client), uint64(time.Now().UnixNano())))
	enc := json.NewEncoder(os.Stdout)
	for i := range n {
		o := helperOp{Client: client, Key: "shared"}
		if rng.IntN(4) == 0 {
			o.Call = monoNow()
			v, err := s.Get(ctx, o.Key)
			o.Return = monoNow()
			switch {
			case err == nil:
				o.Result, o.GotToken, o.Data = "found", v.Token, string(v.Data)
			case errors.Is(err, guard.ErrNotFound):
				o.Result = "missing"
			default:
				o.Result = "error: " + err.Error()
			}
		} else {
			o.Put = true
			o.Token = uint64(i/2 + rng.IntN(5) + 1)
			o.Data = fmt.Sprintf("p%d-%d", client, i)
			o.Call = monoNow()
			err := s.Put(ctx, o.Key, o.Token, []byte(o.Data))
			o.Return = monoNow()
			var se *guard.StaleError
			switch {
			case err == nil:
				o.Result = "accepted"
			case errors.As(err, &se):
				o.Result, o.StaleAccepted = "stale", se.Accepted
			default:
				o.Result = "error: " + err.Error()
			}
		}
		if err := enc.Encode(o); err != nil {
			return 2
		}
	}
	return 0
}

// TestProcessesLinearizable runs several processes writing the same key
// through their own store on one state directory and checks the merged
// history with porcupine.
func TestProcessesLinearizable(t *testing.T) {
	const procs, ops = 4, 40
	state := filepath.Join(t.TempDir(), "state")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		out []byte
		err error
	}
	results := make(chan result, procs)
	for c := range procs {
		cmd := exec.Command(exe, "-test.run=^$")
		cmd.Env = append(os.Environ(), "FENCE_GUARD_HELPER="+strconv.Itoa(c), "FENCE_GUARD_STATE="+state, "FENCE_GUARD_OPS="+strconv.Itoa(ops))
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		go func() {
			out, err := cmd.Output()
			if err != nil {
				err = fmt.Errorf("%w: %s", err, stderr.String())
			}
			results <- result{out, err}
		}()
	}
	var hist []porcupine.Operation
	accepted, refused := 0, 0
	for range procs {
		r := <-results
		if r.err != nil {
			t.Fatalf("helper: %v", r.err)
		}
		sc := bufio.NewScanner(bytes.NewReader(r.out))
		for sc.Scan() {
			var o helperOp
			if err := json.Unmarshal(sc.Bytes(), &o); err != nil {
				t.Fatalf("helper output %q: %v", sc.Text(), err)
			}
			in := guardtest.Input{Put: o.Put, Key: o.Key, Token: o.Token}
			var out guardtest.Output
			switch o.Result {
			case "accepted":
				in.Data, out.Accepted = o.Data, true
				accepted++
			case "stale":
				in.Data, out.Stale, out.StaleAccepted = o.Data, true, o.StaleAccepted
				refused++
			case "found":
				out = guardtest.Output{Found: true, Token: o.GotToken, Data: o.Data}
			case "missing":
			default:
				t.Fatalf("helper %d: %s", o.Client, o.Result)
			}
			hist = append(hist, porcupine.Operation{ClientId: o.Client, Input: in, Output: out, Call: o.Call, Return: o.Return})
		}
	}
	if len(hist) != procs*ops {
		t.Fatalf("recorded %d operations, want %d", len(hist), procs*ops)
	}
	t.Logf("%d operations from %d processes: %d puts accepted, %d refused as stale", len(hist), procs, accepted, refused)
	if accepted == 0 || refused == 0 {
		t.Fatalf("history does not exercise both outcomes")
	}
	if res := porcupine.CheckOperationsTimeout(guardtest.Model(), hist, 30*time.Second); res != porcupine.Ok {
		t.Fatalf("multi-process history is not linearizable: %v", res)
	}
}

// Dir returns the store's directory (<state-dir>/guards).
func (s *store) Dir() string { return s.dir }

// openStore is Open with the concrete type.
func openStore(stateDir string) (*store, error) {
	g, err := Open(stateDir)
	s, _ := g.(*store)
	return s, err
}
