// Package guardtest is the conformance suite every guard.Guard passes, and a
// porcupine model of a fenced register for checking recorded histories.
//
// Only test code imports it.
package guardtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"pgregory.net/rapid"

	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/guard"
	"github.com/fence-dev/fence/pkg/guard/internal/check"
)

// Open returns a guard on an empty store. Run calls it once per subtest;
// the guard's resources are released by t.Cleanup.
type Open func(t *testing.T) guard.Guard

// Run runs the conformance suite against the guards that open returns.
func Run(t *testing.T, open Open) {
	t.Run("GetMissing", func(t *testing.T) { testGetMissing(t, open(t)) })
	t.Run("PutGet", func(t *testing.T) { testPutGet(t, open(t)) })
	t.Run("SameTokenOverwrites", func(t *testing.T) { testSameToken(t, open(t)) })
	t.Run("StaleRefused", func(t *testing.T) { testStale(t, open(t)) })
	t.Run("KeysIndependent", func(t *testing.T) { testKeysIndependent(t, open(t)) })
	t.Run("OddKeys", func(t *testing.T) { testOddKeys(t, open(t)) })
	t.Run("InvalidArguments", func(t *testing.T) { testInvalid(t, open(t)) })
	t.Run("Values", func(t *testing.T) { testValues(t, open(t)) })
	t.Run("CanceledContext", func(t *testing.T) { testCanceled(t, open(t)) })
	t.Run("ConcurrentLinearizable", func(t *testing.T) { testConcurrent(t, open(t)) })
	t.Run("Model", func(t *testing.T) { testModel(t, open(t)) })
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// mustGet reads key and fails unless it holds data at token.
func mustGet(t *testing.T, g guard.Guard, key string, token uint64, data string) guard.Value {
	t.Helper()
	v, err := g.Get(ctxT(t), key)
	if err != nil {
		t.Fatalf("Get(%q): %v", key, err)
	}
	if v.Token != token || string(v.Data) != data {
		t.Fatalf("Get(%q) = %q@%d, want %q@%d", key, v.Data, v.Token, data, token)
	}
	return v
}

func mustPut(t *testing.T, g guard.Guard, key string, token uint64, data string) {
	t.Helper()
	if err := g.Put(ctxT(t), key, token, []byte(data)); err != nil {
		t.Fatalf("Put(%q, %d): %v", key, token, err)
	}
}

func mustNotFound(t *testing.T, g guard.Guard, key string) {
	t.Helper()
	v, err := g.Get(ctxT(t), key)
	if !errors.Is(err, guard.ErrNotFound) {
		t.Fatalf("Get(%q) = %q@%d, %v; want ErrNotFound", key, v.Data, v.Token, err)
	}
}

func testGetMissing(t *testing.T, g guard.Guard) {
	mustNotFound(t, g, "missing")
}

func testPutGet(t *testing.T, g guard.Guard) {
	before := time.Now()
	mustPut(t, g, "job-42", 3, "first")
	v := mustGet(t, g, "job-42", 3, "first")
	after := time.Now()
	if v.UpdatedAt.Before(before.Add(-time.Minute)) || v.UpdatedAt.After(after.Add(time.Minute)) {
		t.Errorf("UpdatedAt = %v, want about %v", v.UpdatedAt, before)
	}
	mustPut(t, g, "job-42", 9, "second")
	v2 := mustGet(t, g, "job-42", 9, "second")
	if v2.UpdatedAt.Before(v.UpdatedAt.Add(-time.Second)) {
		t.Errorf("UpdatedAt went back: %v then %v", v.UpdatedAt, v2.UpdatedAt)
	}
}

func testSameToken(t *testing.T, g guard.Guard) {
	// One holder writes many times with its token: every write is accepted.
	for i := range 3 {
		mustPut(t, g, "k", 5, fmt.Sprint("write ", i))
	}
	mustGet(t, g, "k", 5, "write 2")
}

func testStale(t *testing.T, g guard.Guard) {
	mustPut(t, g, "k", 7, "seven")
	err := g.Put(ctxT(t), "k", 5, []byte("five"))
	if !errors.Is(err, guard.ErrStale) {
		t.Fatalf("Put(5) after 7 = %v, want ErrStale", err)
	}
	var se *guard.StaleError
	if !errors.As(err, &se) {
		t.Fatalf("Put(5) error %T is not a *StaleError", err)
	}
	if se.Key != "k" || se.Token != 5 || se.Accepted != 7 {
		t.Errorf("StaleError = %+v, want {k 5 7}", *se)
	}
	if errors.Is(err, guard.ErrNotFound) || errors.Is(err, coord.ErrInvalid) || errors.Is(err, coord.ErrUnavailable) {
		t.Errorf("StaleError also matches another sentinel: %v", err)
	}
	mustGet(t, g, "k", 7, "seven")
	err = g.Put(ctxT(t), "k", 1, nil)
	if !errors.As(err, &se) || se.Accepted != 7 {
		t.Fatalf("Put(1) = %v, want stale with accepted 7", err)
	}
	mustPut(t, g, "k", 8, "eight")
	mustGet(t, g, "k", 8, "eight")
	mustPut(t, g, "k", check.MaxToken, "max")
	err = g.Put(ctxT(t), "k", check.MaxToken-1, nil)
	if !errors.As(err, &se) || se.Accepted != check.MaxToken {
		t.Fatalf("Put(MaxToken-1) = %v, want stale with accepted MaxToken", err)
	}
	mustGet(t, g, "k", check.MaxToken, "max")
}

func testKeysIndependent(t *testing.T, g guard.Guard) {
	keys := []string{"a", "a/b", "A", "a/", "/a", "a%2Fb", "a%2fb", "ab", "a.b", "a b", "a_b", "~a"}
	for i, k := range keys {
		mustPut(t, g, k, uint64(100-i), k)
	}
	for i, k := range keys {
		mustGet(t, g, k, uint64(100-i), k)
	}
	mustNotFound(t, g, "a/b/c")
	mustNotFound(t, g, "b")
}

// OddKeys are valid keys that stress escaping and quoting.
var OddKeys = []string{
	"/", ".", "..", "./x", "../../etc/passwd", "%", "%00", "%2F", "~", "-", "a\\b", "'", `"`,
	"x'); DROP TABLE guards; --", "`rm -rf /`", "$(id)", "ü", "日本語", "emoji 🦀", "a\u00a0b", "tab\u2003space",
	strings.Repeat("k", check.MaxKeyLen), strings.Repeat("é", check.MaxKeyLen/2), strings.Repeat("%", check.MaxKeyLen),
	strings.Repeat("k", check.MaxKeyLen-1) + "/",
}

func testOddKeys(t *testing.T, g guard.Guard) {
	for i, k := range OddKeys {
		mustPut(t, g, k, uint64(i+1), k)
	}
	for i, k := range OddKeys {
		mustGet(t, g, k, uint64(i+1), k)
	}
}

func testInvalid(t *testing.T, g guard.Guard) {
	ctx := ctxT(t)
	badKeys := []string{"", strings.Repeat("k", check.MaxKeyLen+1), "a\x00b", "a\nb", "\x1b[31m", "a\x7f", "\xff\xfe", "a\u2028b", "\u0085", "a\u202eb", "a\u200bb"}
	for _, k := range badKeys {
		if err := g.Put(ctx, k, 1, []byte("x")); !errors.Is(err, coord.ErrInvalid) {
			t.Errorf("Put(%q) = %v, want ErrInvalid", k, err)
		}
		if _, err := g.Get(ctx, k); !errors.Is(err, coord.ErrInvalid) {
			t.Errorf("Get(%q) = %v, want ErrInvalid", k, err)
		}
	}
	for _, tok := range []uint64{0, check.MaxToken + 1, ^uint64(0)} {
		if err := g.Put(ctx, "k", tok, []byte("x")); !errors.Is(err, coord.ErrInvalid) {
			t.Errorf("Put(token %d) = %v, want ErrInvalid", tok, err)
		}
	}
	mustNotFound(t, g, "k")
}

func testValues(t *testing.T, g guard.Guard) {
	mustPut(t, g, "empty", 1, "")
	mustGet(t, g, "empty", 1, "")
	if err := g.Put(ctxT(t), "nil", 1, nil); err != nil {
		t.Fatal(err)
	}
	mustGet(t, g, "nil", 1, "")
	bin := make([]byte, 256)
	for i := range bin {
		bin[i] = byte(i)
	}
	mustPut(t, g, "binary", 2, string(bin))
	mustGet(t, g, "binary", 2, string(bin))
	big := bytes.Repeat([]byte("0123456789abcdef"), 64<<10/16) // 64 KiB
	mustPut(t, g, "big", 3, string(big))
	mustGet(t, g, "big", 3, string(big))
	// Put must not keep a reference to the caller's slice.
	buf := []byte("original")
	if err := g.Put(ctxT(t), "copy2", 4, buf); err != nil {
		t.Fatal(err)
	}
	copy(buf, "XXXXXXXX")
	mustGet(t, g, "copy2", 4, "original")
}

func testCanceled(t *testing.T, g guard.Guard) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := g.Put(ctx, "k", 1, []byte("x")); err == nil {
		t.Fatal("Put with a canceled context succeeded")
	}
	mustNotFound(t, g, "k")
	if _, err := g.Get(ctx, "k"); err == nil {
		t.Fatal("Get with a canceled context succeeded")
	}
}

// op is one recorded operation.
type op struct {
	client     int
	in         Input
	out        Output
	call, done int64
}

// testConcurrent has many goroutines put (with random tokens that grow
// roughly with time) and get on two keys at once, records every operation,
// and checks the history: linearizable against Model (porcupine); accepted
// puts in real-time order carry non-decreasing tokens; each final value
// carries the largest accepted token.
func testConcurrent(t *testing.T, g guard.Guard) {
	const clients, opsPerClient = 8, 40
	keys := []string{"c/x", "c/y"}
	ctx := ctxT(t)
	start := time.Now()
	now := func() int64 { return int64(time.Since(start)) }
	var (
		mu   sync.Mutex
		hist []op
		wg   sync.WaitGroup
		puts atomic.Int64 // puts started, for tokens that grow with time
	)
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(c), uint64(start.UnixNano())))
			for i := range opsPerClient {
				key := keys[rng.IntN(len(keys))]
				var o op
				o.client = c
				if rng.IntN(5) == 0 {
					o.in = Input{Key: key}
					o.call = now()
					v, err := g.Get(ctx, key)
					o.done = now()
					switch {
					case err == nil:
						o.out = Output{Found: true, Token: v.Token, Data: string(v.Data)}
					case errors.Is(err, guard.ErrNotFound):
					default:
						t.Errorf("Get: %v", err)
						o.out = Output{Unknown: true}
					}
				} else {
					// Tokens grow with the number of puts started, with
					// jitter: some puts race ahead, some fall behind.
					tok := uint64(puts.Add(1)/4) + uint64(rng.IntN(4)) + 1
					o.in = Input{Put: true, Key: key, Token: tok, Data: fmt.Sprintf("c%d-op%d-t%d", c, i, tok)}
					o.call = now()
					err := g.Put(ctx, key, tok, []byte(o.in.Data))
					o.done = now()
					var se *guard.StaleError
					switch {
					case err == nil:
						o.out = Output{Accepted: true}
					case errors.As(err, &se):
						o.out = Output{Stale: true, StaleAccepted: se.Accepted}
						if se.Key != key || se.Token != tok || se.Accepted <= tok {
							t.Errorf("bad StaleError %+v for put(%q, %d)", *se, key, tok)
						}
					default:
						t.Errorf("Put: %v", err)
						o.out = Output{Unknown: true}
					}
				}
				mu.Lock()
				hist = append(hist, o)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}

	ops := make([]porcupine.Operation, len(hist))
	accepted, refused := 0, 0
	for i, o := range hist {
		ops[i] = porcupine.Operation{ClientId: o.client, Input: o.in, Output: o.out, Call: o.call, Return: o.done}
		if o.out.Accepted {
			accepted++
		}
		if o.out.Stale {
			refused++
		}
	}
	t.Logf("%d operations: %d puts accepted, %d refused as stale", len(hist), accepted, refused)
	if accepted == 0 || refused == 0 {
		t.Errorf("the history does not exercise both outcomes (%d accepted, %d refused)", accepted, refused)
	}
	res, info := porcupine.CheckOperationsVerbose(Model(), ops, 30*time.Second)
	if res != porcupine.Ok {
		path := "(not written)"
		if f, err := os.CreateTemp("", "fence-guard-history-*.html"); err == nil {
			if porcupine.Visualize(Model(), info, f) == nil {
				path = f.Name()
			}
			f.Close()
		}
		t.Fatalf("history is not linearizable against a fenced register (result %v); visualization: %s", res, path)
	}

	// The same property, stated directly: an accepted put that began after
	// another accepted put on the same key ended has a token at least as large.
	for _, a := range hist {
		for _, b := range hist {
			if a.out.Accepted && b.out.Accepted && a.in.Key == b.in.Key && a.done < b.call && b.in.Token < a.in.Token {
				t.Errorf("accepted put %q@%d began after accepted put %q@%d ended", b.in.Data, b.in.Token, a.in.Data, a.in.Token)
			}
		}
	}
	for _, key := range keys {
		var maxTok uint64
		datas := map[string]bool{}
		for _, o := range hist {
			if o.in.Key == key && o.out.Accepted {
				if o.in.Token > maxTok {
					maxTok, datas = o.in.Token, map[string]bool{}
				}
				if o.in.Token == maxTok {
					datas[o.in.Data] = true
				}
			}
		}
		v, err := g.Get(ctx, key)
		if err != nil {
			t.Fatalf("final Get(%q): %v", key, err)
		}
		if v.Token != maxTok || !datas[string(v.Data)] {
			t.Errorf("final %q = %q@%d, want one of the writes with the largest accepted token %d", key, v.Data, v.Token, maxTok)
		}
	}
}

var modelRuns atomic.Int64

// testModel checks sequences of puts and gets (rapid) against a map.
func testModel(t *testing.T, g guard.Guard) {
	ctx := ctxT(t)
	rapid.Check(t, func(rt *rapid.T) {
		ns := fmt.Sprintf("m%d/", modelRuns.Add(1))
		keys := []string{ns + "a", ns + "b", ns + "a/b"}
		model := map[string]guard.Value{}
		rt.Repeat(map[string]func(*rapid.T){
			"put": func(rt *rapid.T) {
				key := rapid.SampledFrom(keys).Draw(rt, "key")
				tok := rapid.Uint64Range(1, 12).Draw(rt, "token")
				data := rapid.SliceOfN(rapid.Byte(), 0, 8).Draw(rt, "data")
				err := g.Put(ctx, key, tok, data)
				cur, ok := model[key]
				if ok && tok < cur.Token {
					var se *guard.StaleError
					if !errors.As(err, &se) || se.Accepted != cur.Token || se.Token != tok || se.Key != key {
						rt.Fatalf("put(%q, %d) over token %d = %v, want stale (accepted %d)", key, tok, cur.Token, err, cur.Token)
					}
					return
				}
				if err != nil {
					rt.Fatalf("put(%q, %d) = %v, want accepted (stored token %d)", key, tok, err, cur.Token)
				}
				model[key] = guard.Value{Data: data, Token: tok}
			},
			"get": func(rt *rapid.T) {
				key := rapid.SampledFrom(keys).Draw(rt, "key")
				v, err := g.Get(ctx, key)
				want, ok := model[key]
				if !ok {
					if !errors.Is(err, guard.ErrNotFound) {
						rt.Fatalf("get(%q) = %q@%d, %v; want not found", key, v.Data, v.Token, err)
					}
					return
				}
				if err != nil || v.Token != want.Token || !bytes.Equal(v.Data, want.Data) {
					rt.Fatalf("get(%q) = %q@%d, %v; want %q@%d", key, v.Data, v.Token, err, want.Data, want.Token)
				}
			},
		})
	})
}
