package coordtest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"sync/atomic"
	"time"

	"github.com/fence-dev/fence/internal/clock"
	"github.com/fence-dev/fence/pkg/coord"
)

// section is a critical section shared by goroutines and processes that
// records every overlap it sees. Inside one process an atomic counter must
// never exceed 1; across processes a marker file created with O_EXCL must not
// exist on entry. Every pass through the section is appended to an interval
// log (on the boot clock, comparable across processes) that is checked
// afterwards: intervals must not overlap and tokens must increase with time.
type section struct {
	dir    string
	inside atomic.Int32
}

// interval is one pass through the section.
type interval struct {
	Who   string     `json:"who"`
	Token uint64     `json:"token"`
	Enter clock.Boot `json:"enter"`
	Exit  clock.Boot `json:"exit"`
}

func (s *section) marker() string     { return filepath.Join(s.dir, "occupied") }
func (s *section) logPath() string    { return filepath.Join(s.dir, "intervals") }
func (s *section) violations() string { return filepath.Join(s.dir, "violations") }

// pass runs one pass through the section as the holder of token.
func (s *section) pass(who string, token uint64, hold time.Duration) error {
	iv := interval{Who: who, Token: token, Enter: clock.Now()}
	if n := s.inside.Add(1); n != 1 {
		s.violation("%s (token %d) entered with %d holders inside this process", who, token, n)
	}
	f, err := os.OpenFile(s.marker(), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	switch {
	case errors.Is(err, fs.ErrExist):
		s.violation("%s (token %d) entered while another process was inside", who, token)
	case err != nil:
		return err
	default:
		fmt.Fprintf(f, "%s %d\n", who, token)
		f.Close()
	}
	time.Sleep(hold)
	if err := os.Remove(s.marker()); errors.Is(err, fs.ErrNotExist) {
		s.violation("%s (token %d): someone else left the section while it was inside", who, token)
	} else if err != nil {
		return err
	}
	s.inside.Add(-1)
	iv.Exit = clock.Now()
	return appendLine(s.logPath(), iv)
}

func (s *section) violation(format string, args ...any) {
	// Best effort: a failed write here shows up as a missing interval.
	_ = appendLine(s.violations(), fmt.Sprintf(format, args...))
}

// appendLine appends v as one JSON line with a single O_APPEND write.
func appendLine(path string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(append(b, '\n')); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// check reads the logs and returns every problem found and the passes in
// the order they happened; want is the number of passes expected.
func (s *section) check(want int) ([]string, []interval) {
	var problems []string
	if b, err := os.ReadFile(s.violations()); err == nil {
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			var msg string
			_ = json.Unmarshal(sc.Bytes(), &msg)
			problems = append(problems, "overlap detected: "+msg)
		}
	}
	b, err := os.ReadFile(s.logPath())
	if err != nil {
		return append(problems, fmt.Sprintf("reading the interval log: %v", err)), nil
	}
	var ivs []interval
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		var iv interval
		if err := json.Unmarshal(sc.Bytes(), &iv); err != nil {
			problems = append(problems, fmt.Sprintf("bad interval log line %q: %v", sc.Text(), err))
			continue
		}
		ivs = append(ivs, iv)
	}
	if len(ivs) != want {
		problems = append(problems, fmt.Sprintf("%d passes through the section logged, want %d", len(ivs), want))
	}
	sort.Slice(ivs, func(i, j int) bool { return ivs[i].Enter < ivs[j].Enter })
	for i := 1; i < len(ivs); i++ {
		a, b := ivs[i-1], ivs[i]
		if b.Enter < a.Exit {
			problems = append(problems, fmt.Sprintf("%s (token %d) entered %v before %s (token %d) left",
				b.Who, b.Token, a.Exit.Sub(b.Enter), a.Who, a.Token))
		}
		if b.Token <= a.Token {
			problems = append(problems, fmt.Sprintf("token went from %d (%s) to %d (%s) on the next holder",
				a.Token, a.Who, b.Token, b.Who))
		}
	}
	return problems, ivs
}

// contend acquires name rounds times, waiting as long as needed, and passes
// through the section while holding it.
func contend(cx context.Context, c coord.Coordinator, name string, rounds int, s *section, who string) error {
	for i := 0; i < rounds; i++ {
		l, err := c.Acquire(cx, name, coord.AcquireOptions{TTL: guard, Holder: who, Wait: coord.WaitForever})
		if err != nil {
			return fmt.Errorf("%s: acquire %d: %w", who, i, err)
		}
		if err := s.pass(who, l.Token, time.Millisecond); err != nil {
			return fmt.Errorf("%s: %w", who, err)
		}
		if err := c.Release(cx, name, l.ID); err != nil {
			return fmt.Errorf("%s: release %d: %w", who, i, err)
		}
	}
	return nil
}
