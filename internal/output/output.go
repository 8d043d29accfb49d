// Package output holds fence's printers: key/value text, JSON (snake_case
// fields, RFC 3339 times), YAML, shell assignments for eval, and tables
// (tablewriter: aligned by display width with a header on a terminal;
// tab-separated with no header when piped).
//
// The printers are generic; the shape of each command's output (its fields and
// their names) is defined by the command and documented in docs/json.md.
package output

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/olekukonko/tablewriter"
	"github.com/olekukonko/tablewriter/renderer"
	"github.com/olekukonko/tablewriter/tw"
	"go.yaml.in/yaml/v3"
)

// Format is an output format selected with -o.
type Format string

// The output formats.
const (
	Text  Format = "text"
	JSON  Format = "json"
	YAML  Format = "yaml"
	Table Format = "table"
	Env   Format = "env"
)

// ParseFormat returns s as a Format if it is one of allowed, else an error
// naming the allowed formats.
func ParseFormat(s string, allowed ...Format) (Format, error) {
	for _, f := range allowed {
		if string(f) == s {
			return f, nil
		}
	}
	names := make([]string, len(allowed))
	for i, f := range allowed {
		names[i] = string(f)
	}
	return "", fmt.Errorf("unknown output format %q (want %s)", s, strings.Join(names, ", "))
}

// WriteJSON writes v as indented JSON followed by a newline.
func WriteJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// WriteJSONLine writes v as JSON on one line (JSON Lines), for streams.
func WriteJSONLine(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// WriteYAML writes v as YAML. Field names come from the `yaml` struct tags,
// which fence keeps equal to the `json` ones.
func WriteYAML(w io.Writer, v any) error {
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(v); err != nil {
		return err
	}
	if err := enc.Close(); err != nil {
		return err
	}
	_, err := w.Write(buf.Bytes())
	return err
}

// Field is one line of key/value text output.
type Field struct {
	Key, Value string
}

// WriteFields writes "key: value" lines with the values aligned. Values are
// made safe for a terminal with Clean.
func WriteFields(w io.Writer, fields []Field) error {
	width := 0
	for _, f := range fields {
		width = max(width, len(f.Key))
	}
	var buf bytes.Buffer
	for _, f := range fields {
		fmt.Fprintf(&buf, "%-*s %s\n", width+1, f.Key+":", Clean(f.Value))
	}
	_, err := w.Write(buf.Bytes())
	return err
}

// WriteTable writes rows under header. On a terminal (tty true) the columns
// are aligned and headed; otherwise each row is one line of tab-separated
// cells and there is no header, for cut, awk and while-read loops. Cells are
// made safe with Clean, so a cell never holds a tab or a newline.
func WriteTable(w io.Writer, tty bool, header []string, rows [][]string) error {
	clean := make([][]string, len(rows))
	for i, r := range rows {
		clean[i] = make([]string, len(r))
		for j, c := range r {
			clean[i][j] = Clean(c)
		}
	}
	if !tty {
		var buf bytes.Buffer
		for _, r := range clean {
			buf.WriteString(strings.Join(r, "\t"))
			buf.WriteByte('\n')
		}
		_, err := w.Write(buf.Bytes())
		return err
	}
	var tbuf bytes.Buffer
	// Borderless, left-aligned, the header as given, no wrapping, two
	// blanks between columns, cells not trimmed: Clean has already made
	// each cell one line.
	cell := tw.CellConfig{
		Formatting: tw.CellFormatting{AutoFormat: tw.Off, AutoWrap: tw.WrapNone},
		Alignment:  tw.CellAlignment{Global: tw.AlignLeft},
		Padding:    tw.CellPadding{Global: tw.Padding{Right: "  ", Overwrite: true}},
	}
	t := tablewriter.NewTable(&tbuf,
		tablewriter.WithRenderer(renderer.NewBlueprint(tw.Rendition{
			Borders:  tw.BorderNone,
			Symbols:  tw.NewSymbols(tw.StyleNone),
			Settings: tw.Settings{Separators: tw.SeparatorsNone, Lines: tw.LinesNone},
		})),
		tablewriter.WithConfig(tablewriter.Config{Header: cell, Row: cell}),
		tablewriter.WithTrimSpace(tw.Off),
	)
	t.Header(header)
	if err := t.Bulk(clean); err != nil {
		return err
	}
	if err := t.Render(); err != nil {
		return err
	}
	// tablewriter pads the last column; drop the trailing blanks.
	var out bytes.Buffer
	for _, line := range strings.SplitAfter(tbuf.String(), "\n") {
		nl := strings.HasSuffix(line, "\n")
		out.WriteString(strings.TrimRight(line, " \n"))
		if nl {
			out.WriteByte('\n')
		}
	}
	_, err := w.Write(out.Bytes())
	return err
}

// Clean returns s unchanged when every rune is printable, else s quoted as a
// Go string literal, so that a value read from a coordinator can never move
// the cursor, change the terminal's state or split a line.
func Clean(s string) string {
	for _, r := range s {
		if !unicode.IsPrint(r) && r != ' ' {
			return strconv.Quote(s)
		}
	}
	return s
}

// ShellQuote quotes s for a POSIX shell: the result is one word whose value is
// s, whatever s holds.
func ShellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("@%+=:,./-_", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// Time formats t for JSON and YAML: RFC 3339 in UTC with millisecond
// precision. The zero time gives nil (null).
func Time(t time.Time) *string {
	if t.IsZero() {
		return nil
	}
	s := t.UTC().Format("2006-01-02T15:04:05.000Z07:00")
	return &s
}

// Seconds is d in seconds, rounded to the millisecond, for JSON and YAML.
func Seconds(d time.Duration) float64 {
	return float64(d.Round(time.Millisecond)) / float64(time.Second)
}

// Duration formats d for people: whole seconds from 10s on, tenths of a second
// below ("2.5s", "1m30s").
func Duration(d time.Duration) string {
	switch {
	case d <= 0:
		return "0s"
	case d < 10*time.Second:
		return d.Round(100 * time.Millisecond).String()
	default:
		return d.Round(time.Second).String()
	}
}

// Ranges writes shard numbers, sorted, as runs: [0 1 2 3 7] is "0-3,7"
// ("" for none).
func Ranges(ns []int) string {
	var b []string
	for i := 0; i < len(ns); {
		j := i
		for j+1 < len(ns) && ns[j+1] == ns[j]+1 {
			j++
		}
		if j > i {
			b = append(b, strconv.Itoa(ns[i])+"-"+strconv.Itoa(ns[j]))
		} else {
			b = append(b, strconv.Itoa(ns[i]))
		}
		i = j + 1
	}
	return strings.Join(b, ",")
}
