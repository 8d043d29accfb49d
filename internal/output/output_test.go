package output

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
	"time"
)

var (
	header = []string{"NAME", "HOLDER", "TOKEN"}
	rows   = [][]string{
		{"build", "ci-1:4242", "42"},
		{"deploy/prod", "a holder with spaces", "7"},
	}
)

func TestTableOnTerminalIsAlignedWithHeader(t *testing.T) {
	var b bytes.Buffer
	if err := WriteTable(&b, true, header, rows); err != nil {
		t.Fatal(err)
	}
	want := "" +
		"NAME         HOLDER                TOKEN\n" +
		"build        ci-1:4242             42\n" +
		"deploy/prod  a holder with spaces  7\n"
	if b.String() != want {
		t.Fatalf("got\n%s\nwant\n%s", b.String(), want)
	}
}

// Columns are aligned by the width a terminal shows, not by bytes or runes:
// a CJK character takes two cells, an accented letter one.
func TestTableAlignsByDisplayWidth(t *testing.T) {
	var b bytes.Buffer
	if err := WriteTable(&b, true, []string{"NAME", "HOLDER"}, [][]string{{"界界界", "x"}, {"é", "y"}, {"ab", ""}}); err != nil {
		t.Fatal(err)
	}
	want := "" +
		"NAME    HOLDER\n" +
		"界界界  x\n" +
		"é       y\n" +
		"ab\n"
	if b.String() != want {
		t.Fatalf("got\n%s\nwant\n%s", b.String(), want)
	}
}

func TestTablePipedIsTabSeparatedWithoutHeader(t *testing.T) {
	var b bytes.Buffer
	if err := WriteTable(&b, false, header, rows); err != nil {
		t.Fatal(err)
	}
	want := "build\tci-1:4242\t42\ndeploy/prod\ta holder with spaces\t7\n"
	if b.String() != want {
		t.Fatalf("got %q, want %q", b.String(), want)
	}
}

func TestTableCellsCannotBreakLinesOrColumns(t *testing.T) {
	evil := [][]string{{"x", "tab\there\nnewline\x1b[2J", "1"}}
	for _, tty := range []bool{false, true} {
		var b bytes.Buffer
		if err := WriteTable(&b, tty, header, evil); err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
		wantLines := 1
		if tty {
			wantLines = 2
		}
		if len(lines) != wantLines {
			t.Fatalf("tty=%v: %d lines, want %d: %q", tty, len(lines), wantLines, b.String())
		}
		if strings.ContainsRune(b.String(), 0x1b) {
			t.Fatalf("tty=%v: escape character reached the output: %q", tty, b.String())
		}
		if !tty && strings.Count(lines[0], "\t") != 2 {
			t.Fatalf("piped row has %d tabs, want 2: %q", strings.Count(lines[0], "\t"), lines[0])
		}
	}
}

func TestTableEmpty(t *testing.T) {
	var b bytes.Buffer
	if err := WriteTable(&b, false, header, nil); err != nil {
		t.Fatal(err)
	}
	if b.Len() != 0 {
		t.Fatalf("piped empty table printed %q", b.String())
	}
	b.Reset()
	if err := WriteTable(&b, true, header, nil); err != nil {
		t.Fatal(err)
	}
	if got := b.String(); got != "NAME  HOLDER  TOKEN\n" {
		t.Fatalf("terminal empty table printed %q", got)
	}
}

func TestJSON(t *testing.T) {
	type v struct {
		LeaseID    string  `json:"lease_id"`
		AcquiredAt *string `json:"acquired_at"`
		Holder     *string `json:"holder"`
		TTL        float64 `json:"ttl_seconds"`
	}
	at := time.Date(2026, 3, 4, 5, 6, 7, 891_000_000, time.FixedZone("X", 3600))
	var b bytes.Buffer
	if err := WriteJSON(&b, v{LeaseID: "<a&b>", AcquiredAt: Time(at), TTL: Seconds(1500 * time.Millisecond)}); err != nil {
		t.Fatal(err)
	}
	want := "{\n  \"lease_id\": \"<a&b>\",\n  \"acquired_at\": \"2026-03-04T04:06:07.891Z\",\n  \"holder\": null,\n  \"ttl_seconds\": 1.5\n}\n"
	if b.String() != want {
		t.Fatalf("got\n%s\nwant\n%s", b.String(), want)
	}
	// The time is RFC 3339 and means the same instant.
	var back v
	if err := json.Unmarshal(b.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	parsed, err := time.Parse(time.RFC3339, *back.AcquiredAt)
	if err != nil || !parsed.Equal(at) {
		t.Fatalf("acquired_at %q parses to %v (%v), want %v", *back.AcquiredAt, parsed, err, at)
	}
	b.Reset()
	if err := WriteJSONLine(&b, []int{1, 2}); err != nil || b.String() != "[1,2]\n" {
		t.Fatalf("WriteJSONLine: %q, %v", b.String(), err)
	}
}

func TestYAML(t *testing.T) {
	type v struct {
		Name   string  `yaml:"name"`
		Holder *string `yaml:"holder"`
	}
	var b bytes.Buffer
	if err := WriteYAML(&b, []v{{Name: "a/b"}}); err != nil {
		t.Fatal(err)
	}
	if want := "- name: a/b\n  holder: null\n"; b.String() != want {
		t.Fatalf("got %q, want %q", b.String(), want)
	}
}

func TestWriteFields(t *testing.T) {
	var b bytes.Buffer
	if err := WriteFields(&b, []Field{{"lock", "build"}, {"lease_id", "x\ny"}}); err != nil {
		t.Fatal(err)
	}
	if want := "lock:     build\nlease_id: \"x\\ny\"\n"; b.String() != want {
		t.Fatalf("got %q, want %q", b.String(), want)
	}
}

func TestParseFormat(t *testing.T) {
	if f, err := ParseFormat("json", Text, JSON); err != nil || f != JSON {
		t.Fatalf("json: %v %v", f, err)
	}
	_, err := ParseFormat("xml", Text, JSON)
	if err == nil || err.Error() != `unknown output format "xml" (want text, json)` {
		t.Fatalf("xml: %v", err)
	}
}

func TestDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		-time.Second:                          "0s",
		0:                                     "0s",
		1234 * time.Millisecond:               "1.2s",
		12345 * time.Millisecond:              "12s",
		90*time.Second + 400*time.Millisecond: "1m30s",
	} {
		if got := Duration(d); got != want {
			t.Errorf("Duration(%v) = %q, want %q", d, got, want)
		}
	}
}

// TestShellQuoteRoundTrip gives quoted values to a real shell and reads them
// back.
func TestShellQuoteRoundTrip(t *testing.T) {
	values := []string{"", "plain", "a b", "it's", `"$HOME" $(id) ` + "`x`", "a\\b", "ünïcode/lock", "-n", "x;y|z&", "'", "''"}
	var script strings.Builder
	for _, v := range values {
		script.WriteString("V=" + ShellQuote(v) + "\nprintf '%s\\000' \"$V\"\n")
	}
	out, err := exec.Command("/bin/sh", "-c", script.String()).Output()
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00")
	if len(got) != len(values) {
		t.Fatalf("got %d values back, want %d: %q", len(got), len(values), got)
	}
	for i := range values {
		if got[i] != values[i] {
			t.Errorf("value %q came back as %q (quoted %s)", values[i], got[i], ShellQuote(values[i]))
		}
	}
}

func TestRanges(t *testing.T) {
	for _, c := range []struct {
		ns   []int
		want string
	}{
		{nil, ""}, {[]int{5}, "5"}, {[]int{0, 1, 2, 3, 7}, "0-3,7"}, {[]int{1, 3, 5}, "1,3,5"},
		{[]int{0, 1, 3, 4, 63}, "0-1,3-4,63"},
	} {
		if got := Ranges(c.ns); got != c.want {
			t.Errorf("Ranges(%v) = %q, want %q", c.ns, got, c.want)
		}
	}
}
