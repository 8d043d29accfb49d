package localstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/history"
	"github.com/fence-dev/fence/pkg/history/historytest"
)

// writeFile writes data to a new file and returns it open for reading.
func writeFile(t *testing.T, data []byte) *os.File {
	t.Helper()
	path := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// TestReadTail checks readTail on real files against what it must return:
// the file from a line start on, holding want complete lines unless it is
// the whole file, and no more than the blocks needed for them.
func TestReadTail(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	line := func(n int) string { return strings.Repeat(string(rune('a'+rng.IntN(26))), n) + "\n" }
	files := map[string]string{
		"empty":             "",
		"only a torn line":  "abc",
		"one line":          "abc\n",
		"one line and torn": "abc\nde",
		"long lines":        line(3*tailBlock) + line(tailBlock+1) + line(2*tailBlock),
		"long torn line":    line(10) + strings.Repeat("x", 3*tailBlock),
		"long first line":   line(5*tailBlock) + line(10) + line(10),
	}
	var many strings.Builder
	for range 3000 {
		many.WriteString(line(1 + rng.IntN(300)))
	}
	files["many lines"] = many.String()
	files["many lines and torn"] = many.String() + "{torn"
	for name, content := range files {
		t.Run(name, func(t *testing.T) {
			f := writeFile(t, []byte(content))
			size := int64(len(content))
			for _, want := range []int{1, 2, 3, 32, 1000, 5000} {
				data, start, err := readTail(f, size, want)
				if err != nil {
					t.Fatal(err)
				}
				if string(data) != content[start:] {
					t.Fatalf("want %d: data is not the file from byte %d", want, start)
				}
				if start > 0 && content[start-1] != '\n' {
					t.Fatalf("want %d: start %d is not the start of a line", want, start)
				}
				complete := bytes.Count(data, []byte{'\n'})
				if start > 0 && complete < want {
					t.Fatalf("want %d: %d complete lines from byte %d", want, complete, start)
				}
				// Not much more than needed: the lines wanted, the torn
				// tail, the line cut by the block boundary, and a block
				// size's doubling.
				all := strings.SplitAfter(content, "\n")
				need := 0
				for i := len(all) - 1; i >= 0 && i >= len(all)-1-want-1; i-- {
					need += len(all[i])
				}
				if start > 0 && int(size-start) > 2*need+tailBlock {
					t.Fatalf("want %d: read %d bytes where %d hold the lines", want, size-start, need)
				}
			}
		})
	}
}

// TestReadTailShrunk: a writer cuts a torn tail off between a reader's stat
// and its read: the reader gets the file as it is.
func TestReadTailShrunk(t *testing.T) {
	f := writeFile(t, []byte("a\nb\nc\ntorn"))
	if err := os.Truncate(f.Name(), 6); err != nil {
		t.Fatal(err)
	}
	data, start, err := readTail(f, 10, 1)
	if err != nil || string(data) != "a\nb\nc\n" || start != 0 {
		t.Fatalf("readTail = %q, %d, %v", data, start, err)
	}
}

// longLine is a valid event of lock with seq, longer than the tail block
// (an unknown field, as a newer fence may write).
func longLine(lock string, seq uint64) string {
	return fmt.Sprintf(`{"seq":%d,"time":"%s","lock":%q,"kind":"acquired","token":%d,"x":"%s"}`+"\n",
		seq, time.Now().UTC().Format(time.RFC3339Nano), lock, seq, strings.Repeat("y", 2*tailBlock))
}

func TestLongLines(t *testing.T) {
	s := open(t)
	path := s.File("long")
	var b strings.Builder
	for seq := uint64(1); seq <= 5; seq++ {
		b.WriteString(longLine("long", seq))
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	record(t, s, "long", 6)
	evs, err := s.Latest(context.Background(), "long", 3)
	if err != nil || len(evs) != 3 || evs[0].Token != 4 || evs[2].Token != 6 {
		t.Fatalf("Latest = %+v, %v", evs, err)
	}
	heads, err := s.Heads(context.Background())
	if err != nil || len(heads) != 1 || heads[0].Seq != 6 {
		t.Fatalf("Heads = %+v, %v", heads, err)
	}
	ents, err := s.Since(context.Background(), "long", 0)
	if err != nil || len(ents) != 6 || ents[5].Seq != 6 {
		t.Fatalf("Since = %+v, %v", ents, err)
	}
}

// TestTornOnly: a file holding nothing but a torn line (a crash in the
// first append) reads as empty; the next write cuts it off and starts at 1.
func TestTornOnly(t *testing.T) {
	for name, content := range map[string]string{
		"torn":       `{"seq":1,"time":"2030-01-01T00:00:00Z","lo`,
		"empty file": "",
		"long torn":  strings.TrimSuffix(longLine("t", 1), "\n"),
	} {
		t.Run(name, func(t *testing.T) {
			s := open(t)
			if err := os.WriteFile(s.File("t"), []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			if evs, err := s.History(ctx, "t", 0); err != nil || len(evs) != 0 {
				t.Fatalf("History = %v, %v", evs, err)
			}
			if evs, err := s.Latest(ctx, "t", 5); err != nil || len(evs) != 0 {
				t.Fatalf("Latest = %v, %v", evs, err)
			}
			if heads, err := s.Heads(ctx); err != nil || len(heads) != 0 {
				t.Fatalf("Heads = %v, %v", heads, err)
			}
			record(t, s, "t", 7)
			ents, err := s.Since(ctx, "t", 0)
			if err != nil || len(ents) != 1 || ents[0].Seq != 1 || ents[0].Event.Token != 7 {
				t.Fatalf("Since = %+v, %v", ents, err)
			}
			b, _ := os.ReadFile(s.File("t"))
			if bytes.Count(b, []byte{'\n'}) != 1 || !bytes.HasPrefix(b, []byte(`{"seq":1,`)) {
				t.Fatalf("file:\n%s", b)
			}
		})
	}
}

// fill writes n events to lock, tokens 1..n, one Append.
func fill(t testing.TB, s *store, lock string, n int, at time.Time) {
	t.Helper()
	evs := make([]history.Event, n)
	for i := range evs {
		evs[i] = history.Event{Time: at, Lock: lock, Kind: history.Acquired, Holder: "host:1234", Token: uint64(i + 1)}
	}
	if err := s.Append(context.Background(), evs); err != nil {
		t.Fatal(err)
	}
}

// TestDamageBeyondTheTail damages a file far from its end, where a write's
// tail read does not look: full reads refuse it, a store that saw that
// refuses to write, and the next compaction refuses it too, without
// writing; no write ever changes the damaged line.
func TestDamageBeyondTheTail(t *testing.T) {
	const max = 100 // slack 25
	opts := []history.Option{historytest.WithMaxEvents(max)}
	s := open(t, opts...)
	fill(t, s, "d", 100, time.Time{})
	path := s.File("d")
	insertLine(t, path, 5, "{garbage")
	fresh := func() *store {
		st, err := openStore(filepath.Dir(s.Dir()), opts...)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}

	// A new process's write reads the tail only: it appends after the
	// damage (and leaves it as it is).
	w := fresh()
	record(t, w, "d", 101)
	if evs, err := w.Latest(context.Background(), "d", 2); err != nil || len(evs) != 2 || evs[1].Token != 101 {
		t.Fatalf("Latest = %+v, %v", evs, err)
	}
	// A full read refuses the file; then that store writes no more.
	r := fresh()
	failsClosed(t, r, "d")
	if _, err := r.Latest(context.Background(), "d", 2); err == nil {
		t.Fatal("Latest after a full read found damage: no error")
	}
	// Writers that saw nothing go on until the compaction, which refuses,
	// and so does every write after it.
	var refused int
	for i := uint64(102); i <= 140; i++ {
		before, _ := os.ReadFile(path)
		err := fresh().Record(context.Background(), history.Event{Lock: "d", Kind: history.Acquired, Token: i})
		if err == nil {
			if refused > 0 {
				t.Fatalf("event %d written after a refusal", i)
			}
			continue
		}
		if !strings.Contains(err.Error(), "line 6") {
			t.Fatalf("error does not name the damaged line: %v", err)
		}
		refused++
		if after, _ := os.ReadFile(path); !bytes.Equal(before, after) {
			t.Fatalf("a refused write changed the file")
		}
	}
	if want := 140 - (max + slackOf(max)); refused != want {
		t.Fatalf("%d writes refused, want %d (all from the compaction on)", refused, want)
	}
	if b, _ := os.ReadFile(path); !bytes.Contains(b, []byte("\n{garbage\n")) {
		t.Fatal("the damaged line is gone")
	}
}

// TestDamageInTheTail: damage in a write's tail read, or in the first line,
// of a file longer than that read is refused by the first write.
func TestDamageInTheTail(t *testing.T) {
	cases := map[string]func(t *testing.T, path string){
		"garbage near the end": func(t *testing.T, path string) { insertLine(t, path, 98, "{garbage") },
		"first line garbage":   func(t *testing.T, path string) { insertLine(t, path, 0, "{garbage") },
		"first line too high": func(t *testing.T, path string) {
			insertLine(t, path, 0, fmt.Sprintf(`{"seq":500,"time":"%s","lock":"d","kind":"acquired"}`,
				time.Now().UTC().Format(time.RFC3339Nano)))
		},
		"first line of another lock": func(t *testing.T, path string) {
			insertLine(t, path, 0, fmt.Sprintf(`{"seq":0,"time":"%s","lock":"e","kind":"acquired"}`,
				time.Now().UTC().Format(time.RFC3339Nano)))
		},
		"last line goes back": func(t *testing.T, path string) {
			insertLine(t, path, 100, fmt.Sprintf(`{"seq":3,"time":"%s","lock":"d","kind":"acquired"}`,
				time.Now().UTC().Format(time.RFC3339Nano)))
		},
	}
	for name, damage := range cases {
		t.Run(name, func(t *testing.T) {
			s := open(t)
			fill(t, s, "d", 100, time.Time{})
			if fi, _ := os.Stat(s.File("d")); fi.Size() < 2*tailBlock {
				t.Fatalf("file of %d bytes: too short for the test", fi.Size())
			}
			damage(t, s.File("d"))
			before, _ := os.ReadFile(s.File("d"))
			// A fresh store's first write, before any full read.
			fresh, err := openStore(filepath.Dir(s.Dir()))
			if err != nil {
				t.Fatal(err)
			}
			err = fresh.Record(context.Background(), history.Event{Lock: "d", Kind: history.Acquired, Token: 200})
			if !errors.Is(err, coord.ErrUnavailable) || !strings.Contains(err.Error(), "bad history file") {
				t.Fatalf("first write = %v, want a bad history file", err)
			}
			if after, _ := os.ReadFile(s.File("d")); !bytes.Equal(before, after) {
				t.Fatal("the refused write changed the file")
			}
			failsClosed(t, fresh, "d")
		})
	}
}

// TestStaleTemps: Open leaves temporary files alone (it does not list the
// directory); a compaction removes those older than a minute.
func TestStaleTemps(t *testing.T) {
	s := open(t, historytest.WithMaxEvents(4))
	old := filepath.Join(s.Dir(), tempPrefix+"old")
	young := filepath.Join(s.Dir(), tempPrefix+"young")
	for _, p := range []string{old, young} {
		if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	past := time.Now().Add(-2 * time.Minute)
	if err := os.Chtimes(old, past, past); err != nil {
		t.Fatal(err)
	}
	s2, err := openStore(filepath.Dir(s.Dir()), historytest.WithMaxEvents(4))
	if err != nil {
		t.Fatal(err)
	}
	record(t, s2, "k", 1)
	if _, err := os.Stat(old); err != nil {
		t.Fatalf("Open or a plain write removed a temporary file: %v", err)
	}
	for i := uint64(2); i <= 6; i++ { // the sixth write compacts
		record(t, s2, "k", i)
	}
	if _, err := os.Stat(old); !os.IsNotExist(err) {
		t.Fatalf("stale temporary file still there after a compaction: %v", err)
	}
	if _, err := os.Stat(young); err != nil {
		t.Fatalf("young temporary file removed: %v", err)
	}
}

// BenchmarkAppendAtBound measures what a fence run costs the history at
// different history sizes: a fresh store (a new process), the last lease
// event (Latest, 32 events) and one write with its fsync. The file is cut
// back to its size after each iteration, so every one sees the same file.
func BenchmarkAppendAtBound(b *testing.B) {
	ev := history.Event{Lock: "hl", Kind: history.Acquired, Holder: "host:1234", Token: 1}
	atBound(b, func(b *testing.B, s *store, path string, size int64) {
		if err := s.Record(context.Background(), ev); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if err := os.Truncate(path, size); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	})
}

// BenchmarkReadsAtBound is BenchmarkAppendAtBound without the write and
// its fsync: the reads of a fence run's first write (a fresh store, Latest,
// the write's check of the file), which are what grew with the history.
func BenchmarkReadsAtBound(b *testing.B) {
	atBound(b, func(b *testing.B, s *store, path string, _ int64) {
		f, err := os.OpenFile(path, os.O_RDWR|os.O_APPEND, 0)
		if err != nil {
			b.Fatal(err)
		}
		fi, err := s.checkFile("hl", path, f)
		if err != nil {
			b.Fatal(err)
		}
		if _, _, _, err := s.readFile("hl", path, fileBase("hl"), f, fi.Size(), 1, true); err != nil {
			b.Fatal(err)
		}
		f.Close()
	})
}

// atBound runs, for histories of 10, 1000 and 1240 events, a loop of: a
// fresh store on the state directory, Latest(32) of the lock, then step
// with the store, the lock's history file and its size before the loop.
func atBound(b *testing.B, step func(b *testing.B, s *store, path string, size int64)) {
	for _, n := range []int{10, 1000, 1240} {
		b.Run(fmt.Sprintf("events=%d", n), func(b *testing.B) {
			state := filepath.Join(b.TempDir(), "state")
			s, err := openStore(state)
			if err != nil {
				b.Fatal(err)
			}
			fill(b, s, "hl", n, time.Time{})
			path := s.File("hl")
			fi, err := os.Stat(path)
			if err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				s, err := openStore(state)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := s.Latest(context.Background(), "hl", 32); err != nil {
					b.Fatal(err)
				}
				step(b, s, path, fi.Size())
			}
		})
	}
}

func TestLastLines(t *testing.T) {
	for _, c := range []struct {
		in   string
		n    int
		want string
	}{
		{"", 1, ""}, {"a\n", 1, "a\n"}, {"a\nb\nc\n", 1, "c\n"}, {"a\nb\nc\n", 2, "b\nc\n"},
		{"a\nb\nc\n", 3, "a\nb\nc\n"}, {"a\nb\nc\n", 9, "a\nb\nc\n"}, {"\n\n", 1, "\n"},
	} {
		if got := string(lastLines([]byte(c.in), c.n)); got != c.want {
			t.Errorf("lastLines(%q, %d) = %q, want %q", c.in, c.n, got, c.want)
		}
	}
}

// TestLatestDamageStopsWrites: damage that Latest finds, beyond what a
// write's own tail read covers, stops that store's writes.
func TestLatestDamageStopsWrites(t *testing.T) {
	s := open(t)
	fill(t, s, "d", 100, time.Time{})
	insertLine(t, s.File("d"), 40, "{garbage") // 60 lines from the end, more than 4 KiB
	s, err := openStore(filepath.Dir(s.Dir()))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Latest(context.Background(), "d", 80); !errors.Is(err, coord.ErrUnavailable) {
		t.Fatalf("Latest over the damage = %v", err)
	}
	before, _ := os.ReadFile(s.File("d"))
	if err := s.Record(context.Background(), history.Event{Lock: "d", Kind: history.Acquired}); !errors.Is(err, coord.ErrUnavailable) {
		t.Fatalf("Record after Latest found damage = %v", err)
	}
	if after, _ := os.ReadFile(s.File("d")); !bytes.Equal(before, after) {
		t.Fatal("the file changed")
	}
	// Another store, which read nothing, checks only the tail and writes.
	other, err := openStore(filepath.Dir(s.Dir()))
	if err != nil {
		t.Fatal(err)
	}
	record(t, other, "d", 101)
	// Repaired in place (same file): the first store writes again.
	b, _ := os.ReadFile(s.File("d"))
	if err := os.WriteFile(s.File("d"), bytes.Replace(b, []byte("{garbage\n"), nil, 1), 0o600); err != nil {
		t.Fatal(err)
	}
	record(t, s, "d", 102)
	if evs, err := s.Latest(context.Background(), "d", 80); err != nil || len(evs) != 80 || evs[79].Token != 102 {
		t.Fatalf("after the repair: %d events, %v", len(evs), err)
	}
}

// TestWriteDamageMarks: damage a write finds in its tail read marks the
// file for that store as a full read's does: once the damage in the tail is
// repaired by hand, its next write still reads the whole file, and refuses
// the damage further up that a tail read does not reach; a store that found
// nothing writes after it (TestDamageBeyondTheTail).
func TestWriteDamageMarks(t *testing.T) {
	s := open(t)
	fill(t, s, "d", 100, time.Time{})
	path := s.File("d")
	sound, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	insertLine(t, path, 5, "{garbage")
	withMiddle, _ := os.ReadFile(path)
	insertLine(t, path, 101, "{garbage at the end")
	if err := s.Record(context.Background(), history.Event{Lock: "d", Kind: history.Acquired, Token: 200}); !errors.Is(err, coord.ErrUnavailable) {
		t.Fatalf("write on damage in its tail = %v, want ErrUnavailable", err)
	}
	if err := os.WriteFile(path, withMiddle, 0o600); err != nil { // the end repaired
		t.Fatal(err)
	}
	err = s.Record(context.Background(), history.Event{Lock: "d", Kind: history.Acquired, Token: 201})
	if !errors.Is(err, coord.ErrUnavailable) || !strings.Contains(err.Error(), "line 6") {
		t.Fatalf("write after the end was repaired = %v, want the damage at line 6", err)
	}
	if b, _ := os.ReadFile(path); !bytes.Equal(b, withMiddle) {
		t.Fatal("the refused write changed the file")
	}
	if err := os.WriteFile(path, sound, 0o600); err != nil { // all repaired
		t.Fatal(err)
	}
	record(t, s, "d", 202)
	if evs, err := s.Latest(context.Background(), "d", 1); err != nil || len(evs) != 1 || evs[0].Token != 202 {
		t.Fatalf("Latest after the repair = %+v, %v", evs, err)
	}
}
