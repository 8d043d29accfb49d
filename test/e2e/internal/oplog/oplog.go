// Package oplog is the operation log of the end-to-end tests: each process
// that touches the fenced counter appends one JSON line when an operation
// starts and one when it ends, to a file of its own; the test merges the
// files into a history for the linearizability checker.
//
// Times are on the boot clock (internal/clock, CLOCK_BOOTTIME), which every
// process of one boot shares and which does not jump.
package oplog

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
)

// Kinds of operation on the fenced counter.
const (
	// Claim is the holder's first write: it sets the row's fence to the
	// holder's token (and its holder column) without changing the value, so
	// that every older holder is refused from then on.
	Claim = "claim"
	// Read reads the value and the fence.
	Read = "read"
	// Incr writes From+1 with the holder's token, From being the value the
	// holder knows is current (read after its claim, or its own last write).
	Incr = "incr"
)

// Phases of a record.
const (
	Call = "call"
	Ret  = "ret"
)

// Results of a write (Ret records).
const (
	OK    = "ok"    // accepted (a read: answered)
	Stale = "stale" // refused: a larger token was accepted
	Error = "error" // failed without a definite answer: it may or may not have taken effect
)

// Record is one line of a log.
type Record struct {
	ID     string `json:"id"`     // unique per operation: "<pid>.<seq>"
	Client int    `json:"client"` // the contender that ran the process
	PID    int    `json:"pid"`
	Phase  string `json:"phase"` // Call or Ret
	Kind   string `json:"kind"`  // Claim, Read or Incr
	Token  uint64 `json:"token"`
	From   int64  `json:"from,omitempty"` // Incr
	To     int64  `json:"to,omitempty"`   // Incr: From+1
	T      int64  `json:"t"`              // boot clock, ns
	Result string `json:"result,omitempty"`
	Value  int64  `json:"value,omitempty"` // Read
	Fence  uint64 `json:"fence,omitempty"` // Read; Stale: the fence read after the refusal
	Err    string `json:"err,omitempty"`
}

// Writer appends records to one file, each with a single write(2), so that
// a process killed between two records leaves whole lines.
type Writer struct {
	mu sync.Mutex
	f  *os.File
}

// Create opens (creating or appending to) the log file path.
func Create(path string) (*Writer, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	return &Writer{f: f}, nil
}

// Append writes r as one line.
func (w *Writer) Append(r Record) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	_, err = w.f.Write(append(b, '\n'))
	return err
}

// Close closes the file.
func (w *Writer) Close() error { return w.f.Close() }

// ReadDir reads every *.jsonl file of dir. A last line cut short (which a
// single write should never leave) is reported in torn, not as an error.
func ReadDir(dir string) (recs []Record, torn int, err error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.jsonl"))
	if err != nil {
		return nil, 0, err
	}
	sort.Strings(paths)
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			return nil, 0, err
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		line := 0
		for sc.Scan() {
			line++
			var r Record
			if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
				if !strings.HasSuffix(string(sc.Bytes()), "}") {
					torn++
					continue
				}
				f.Close()
				return nil, 0, fmt.Errorf("%s:%d: %w", p, line, err)
			}
			recs = append(recs, r)
		}
		err = sc.Err()
		f.Close()
		if err != nil {
			return nil, 0, fmt.Errorf("%s: %w", p, err)
		}
	}
	return recs, torn, nil
}

// Op is one operation: its call record and, when the process recorded it,
// its return record.
type Op struct {
	Call Record
	Ret  *Record // nil: the process died (or was killed) before it returned
}

// Unknown reports whether the operation has no definite outcome: no return
// record, or an Error result.
func (o Op) Unknown() bool { return o.Ret == nil || o.Ret.Result == Error }

// Pair matches call and return records by ID, in the order of the calls'
// times. A return without a call, a second call or return with the same ID,
// or records of one ID that disagree on kind or token is an error: the logs
// are not trustworthy.
func Pair(recs []Record) ([]Op, error) {
	byID := map[string]*Op{}
	var order []string
	for _, r := range recs {
		if r.Phase == Call {
			if _, dup := byID[r.ID]; dup {
				return nil, fmt.Errorf("operation %s: two call records", r.ID)
			}
			byID[r.ID] = &Op{Call: r}
			order = append(order, r.ID)
		}
	}
	for _, r := range recs {
		switch r.Phase {
		case Call:
		case Ret:
			o := byID[r.ID]
			switch {
			case o == nil:
				return nil, fmt.Errorf("operation %s: a return record without a call", r.ID)
			case o.Ret != nil:
				return nil, fmt.Errorf("operation %s: two return records", r.ID)
			case o.Call.Kind != r.Kind || o.Call.Token != r.Token:
				return nil, fmt.Errorf("operation %s: call and return disagree (%s/%d, %s/%d)", r.ID, o.Call.Kind, o.Call.Token, r.Kind, r.Token)
			case r.T < o.Call.T:
				return nil, fmt.Errorf("operation %s: returned before its call", r.ID)
			}
			rr := r
			o.Ret = &rr
		default:
			return nil, errors.New("operation " + r.ID + ": unknown phase " + r.Phase)
		}
	}
	ops := make([]Op, 0, len(order))
	for _, id := range order {
		ops = append(ops, *byID[id])
	}
	sort.SliceStable(ops, func(i, j int) bool { return ops[i].Call.T < ops[j].Call.T })
	return ops, nil
}
