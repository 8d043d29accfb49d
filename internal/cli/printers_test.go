package cli

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/fence-dev/fence/pkg/history"

	"github.com/fence-dev/fence/internal/contention"
	"github.com/fence-dev/fence/internal/output"
	"github.com/fence-dev/fence/pkg/coord"
)

var (
	testNow = time.Date(2026, 5, 6, 7, 8, 9, 0, time.UTC)
	held    = coord.LockInfo{
		Name: "build", Held: true, Holder: "ci-1:4242", Token: 42, LeaseID: "694d7a0b1c2d3e4f",
		TTL: 15 * time.Second, TTLLeft: 12300 * time.Millisecond, AcquiredAt: testNow.Add(-3 * time.Second),
		Waiters: 2, LastToken: 42,
	}
	free = coord.LockInfo{Name: "deploy/prod", LastToken: 7}
)

func testFactory(tty bool) (*Factory, *bytes.Buffer) {
	var out, errOut bytes.Buffer
	ios := Test(&out, &errOut)
	ios.SetStdoutTTY(tty)
	f := NewFactory(ios)
	f.Now = func() time.Time { return testNow }
	return f, &out
}

func TestListTableOnTerminal(t *testing.T) {
	f, out := testFactory(true)
	if err := printList(f, output.Table, []coord.LockInfo{held, free}, ""); err != nil {
		t.Fatal(err)
	}
	want := "" +
		"NAME         HOLDER     TOKEN  TTL LEFT  HELD FOR  WAITERS\n" +
		"build        ci-1:4242  42     12s       3s        2\n" +
		"deploy/prod  -          -      -         -         0\n"
	if out.String() != want {
		t.Fatalf("got\n%s\nwant\n%s", out, want)
	}
}

func TestListTablePiped(t *testing.T) {
	f, out := testFactory(false)
	if err := printList(f, output.Table, []coord.LockInfo{held, free}, ""); err != nil {
		t.Fatal(err)
	}
	want := "build\tci-1:4242\t42\t12s\t3s\t2\ndeploy/prod\t-\t-\t-\t-\t0\n"
	if out.String() != want {
		t.Fatalf("got %q, want %q", out, want)
	}
}

func TestListEmpty(t *testing.T) {
	f, out := testFactory(false)
	if err := printList(f, output.Table, nil, ""); err != nil || out.Len() != 0 {
		t.Fatalf("piped: %q, %v", out, err)
	}
	f, out = testFactory(true)
	if err := printList(f, output.Table, nil, ""); err != nil || out.String() != "no locks\n" {
		t.Fatalf("terminal: %q, %v", out, err)
	}
	f, out = testFactory(false)
	if err := printList(f, output.JSON, nil, ""); err != nil || out.String() != "[]\n" {
		t.Fatalf("json: %q, %v", out, err)
	}
}

// TestListJSONSameOnAndOffTerminal: JSON does not depend on the terminal, and
// has every documented field, with null for those of a free lock.
func TestListJSONSameOnAndOffTerminal(t *testing.T) {
	var outs [2]string
	for i, tty := range []bool{false, true} {
		f, out := testFactory(tty)
		if err := printList(f, output.JSON, []coord.LockInfo{held, free}, ""); err != nil {
			t.Fatal(err)
		}
		outs[i] = out.String()
	}
	if outs[0] != outs[1] {
		t.Fatalf("JSON differs on a terminal:\n%s\n%s", outs[0], outs[1])
	}
	var got []map[string]any
	if err := json.Unmarshal([]byte(outs[0]), &got); err != nil {
		t.Fatal(err)
	}
	fields := []string{"name", "held", "holder", "token", "lease_id", "ttl_seconds", "ttl_left_seconds",
		"acquired_at", "held_for_seconds", "waiters", "queue", "last_token", "process", "limit", "slots", "holders"}
	for _, m := range got {
		if len(m) != len(fields) {
			t.Errorf("%v: %d fields, want %d", m["name"], len(m), len(fields))
		}
		for _, k := range fields {
			if _, ok := m[k]; !ok {
				t.Errorf("%v: no field %q", m["name"], k)
			}
		}
	}
	h, fr := got[0], got[1]
	if h["token"] != 42.0 || h["ttl_left_seconds"] != 12.3 || h["held_for_seconds"] != 3.0 || h["acquired_at"] != "2026-05-06T07:08:06.000Z" || h["lease_id"] != "694d7a0b1c2d3e4f" {
		t.Errorf("held lock: %v", h)
	}
	if fr["held"] != false || fr["holder"] != nil || fr["token"] != nil || fr["last_token"] != 7.0 {
		t.Errorf("free lock: %v", fr)
	}
}

func TestListWatchFormats(t *testing.T) {
	f, out := testFactory(false)
	for range 2 {
		if err := printList(f, output.JSON, []coord.LockInfo{held}, "local /test"); err != nil {
			t.Fatal(err)
		}
	}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], `[{"name":"build"`) {
		t.Fatalf("watch JSON is not one list per line: %q", out)
	}
	f, out = testFactory(false)
	_ = printList(f, output.Table, []coord.LockInfo{held}, "local /test")
	_ = printList(f, output.Table, []coord.LockInfo{free}, "local /test")
	if want := "build\tci-1:4242\t42\t12s\t3s\t2\n\ndeploy/prod\t-\t-\t-\t-\t0\n\n"; out.String() != want {
		t.Fatalf("piped watch: %q, want %q", out, want)
	}
	f, out = testFactory(true)
	_ = printList(f, output.Table, []coord.LockInfo{held}, "local /test")
	if !strings.HasPrefix(out.String(), clearScreen) || !strings.Contains(out.String(), "NAME ") {
		t.Fatalf("terminal watch does not redraw: %q", out)
	}
}

func TestLockFieldsText(t *testing.T) {
	var b bytes.Buffer
	if err := output.WriteFields(&b, lockFields(free, testNow)); err != nil {
		t.Fatal(err)
	}
	if want := "lock:       deploy/prod\nstate:      free\nlast_token: 7\nwaiters:    0\n"; b.String() != want {
		t.Fatalf("got %q, want %q", b.String(), want)
	}
	b.Reset()
	_ = output.WriteFields(&b, lockFields(held, testNow))
	for _, want := range []string{"state:       held\n", "holder:      ci-1:4242\n", "token:       42\n", "ttl_left:    12s\n", "held_for:    3s\n"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("no %q in\n%s", want, b.String())
		}
	}
}

func TestEventRows(t *testing.T) {
	evs := []history.Event{
		{Time: testNow, Kind: history.Acquired, Holder: "h", Token: 3, Wait: 1500 * time.Millisecond},
		{Time: testNow, Kind: history.Released, Holder: "h", Token: 3, HeldFor: time.Minute},
		{Time: testNow, Kind: history.RenewalFailed, Holder: "h", Token: 3, Count: 2, Error: "timeout"},
		{Time: testNow, Kind: history.StaleRefused, Key: "k", Token: 2, AcceptedToken: 3},
	}
	details := []string{"waited 1.5s", "held 1m0s", "2 failed: timeout", "key k: token 2 < accepted 3"}
	for i, e := range evs {
		if got := eventRow(e)[4]; got != details[i] {
			t.Errorf("%s: detail %q, want %q", e.Kind, got, details[i])
		}
	}
	v := newEventView(evs[0])
	b, _ := json.Marshal(v)
	if want := `{"time":"2026-05-06T07:08:09.000Z","kind":"acquired","holder":"h","token":3,"wait_seconds":1.5,"held_for_seconds":null,"count":null,"error":null,"key":null,"accepted_token":null,"reason":null}`; string(b) != want {
		t.Fatalf("event JSON\n%s\nwant\n%s", b, want)
	}
}

// TestContention: fence show puts the waits and holds of the events side
// by side, on one sparkline scale, and says when waits exceed holds.
func TestContention(t *testing.T) {
	ms := time.Millisecond
	evs := []history.Event{
		{Kind: history.Acquired, Wait: 0},
		{Kind: history.Released, HeldFor: 500 * ms},
		{Kind: history.Acquired, Wait: 500 * ms},
		{Kind: history.Released, HeldFor: 500 * ms},
		{Kind: history.Acquired, Wait: 1000 * ms},
		{Kind: history.RenewalFailed, Count: 1},
	}
	sum := contention.Of(evs)
	c := newContention(sum)
	got := strings.Join(contentionLines(sum), "\n")
	want := "" +
		"wait  n=3   median 500ms    max 1s       total 1.5s     ▁▄█\n" +
		"hold  n=2   median 500ms    max 500ms    total 1s       ▄▄\n" +
		"waits exceed holds: the lock is the bottleneck"
	if got != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
	b, _ := json.Marshal(c)
	if w := `{"wait":{"count":3,"median_seconds":0.5,"max_seconds":1,"total_seconds":1.5,"recent_seconds":[0,0.5,1]},"hold":{"count":2,"median_seconds":0.5,"max_seconds":0.5,"total_seconds":1,"recent_seconds":[0.5,0.5]}}`; string(b) != w {
		t.Fatalf("contention JSON\n%s\nwant\n%s", b, w)
	}
	if lines := contentionLines(contention.Of(nil)); lines != nil {
		t.Errorf("no events: %q, want nothing", lines)
	}
}
