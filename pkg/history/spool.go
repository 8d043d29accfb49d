package history

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/fence-dev/fence/internal/sharedir"
	hopts "github.com/fence-dev/fence/pkg/history/internal/opts"
	"github.com/fence-dev/fence/pkg/internal/atomicfile"
)

// The spool (WithSpool) keeps, in files on the host, the events a Recorder
// could not write by the time it was closed (the coordinator did not
// answer), until a Recorder on the same store writes them (FlushSpool):
//
//	<dir>/<unix ns>-<pid>-<random>.jsonl   one file per close, one event per line
//	<dir>/<name>.jsonl.<unix ns>.flushing  a file claimed by a flush (renamed)
//	<dir>/<name>.jsonl.bad                 a damaged file, set aside
//
// A file is written whole (atomicfile.WritePerm) and claimed by renaming
// it, so that of two flushes at once only one writes it.

// Bounds of a spool directory: beyond them the oldest files are dropped
// (and counted in a warning).
const (
	spoolMaxEvents = 1000
	spoolMaxBytes  = 1 << 20
)

// spoolFlushTimeout bounds FlushSpool's writes when its context has no
// sooner deadline.
const spoolFlushTimeout = time.Second

const (
	spoolExt   = ".jsonl"
	claimExt   = ".flushing"
	badExt     = ".bad"
	staleClaim = time.Minute // a claim older than this is a dead flush's
	maxLine    = 64 << 10
)

// WithSpool keeps the events a Recorder could not write when it is closed
// in files under dir (created when missing: 0700, files 0600, or 2770 and
// 0660 inside a state directory a group shares), and lets FlushSpool write
// them later, with their original times. dir must hold the events of one
// store only: a flush writes them to its Recorder's.
func WithSpool(dir string) Option { return func(o *hopts.Options) { o.SpoolDir = dir } }

type spool struct {
	dir string
	log *slog.Logger
}

// keep writes evs durably into a new spool file, then drops the oldest
// files beyond the bounds. It returns the number of events dropped.
func (s *spool) keep(evs []Event) (dropped int, err error) {
	if len(evs) == 0 {
		return 0, nil
	}
	m, err := sharedir.OfSubdir(s.dir)
	if err != nil {
		return 0, err
	}
	var lines [][]byte // the newest events within the bounds, newest first
	for i, size := len(evs)-1, 0; i >= 0 && len(lines) < spoolMaxEvents; i-- {
		b, err := json.Marshal(evs[i])
		if err != nil {
			return 0, err
		}
		if size += len(b) + 1; size > spoolMaxBytes {
			break
		}
		lines = append(lines, append(b, '\n'))
	}
	dropped = len(evs) - len(lines)
	if len(lines) > 0 {
		slices.Reverse(lines)
		var rnd [4]byte
		_, _ = rand.Read(rnd[:])
		name := fmt.Sprintf("%020d-%d-%s%s", time.Now().UnixNano(), os.Getpid(), hex.EncodeToString(rnd[:]), spoolExt)
		if _, err := atomicfile.WritePerm(filepath.Join(s.dir, name), bytes.Join(lines, nil), true, m.FilePerm()); err != nil {
			return dropped, err
		}
	}
	return dropped + s.trim(), nil
}

// trim removes the oldest spool files while the spool holds more than its
// bounds, and returns the number of events they held.
func (s *spool) trim() (dropped int) {
	names := s.files()
	var events, size int64
	removed := false
	for i := len(names) - 1; i >= 0; i-- {
		path := filepath.Join(s.dir, names[i])
		b, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		n := int64(bytes.Count(b, []byte{'\n'}))
		if events+n <= spoolMaxEvents && size+int64(len(b)) <= spoolMaxBytes {
			events, size = events+n, size+int64(len(b))
			continue
		}
		if os.Remove(path) == nil {
			dropped += int(n)
			removed = true
		}
	}
	if removed {
		_ = atomicfile.SyncDir(s.dir)
	}
	return dropped
}

// files returns the names of the spool files waiting to be written,
// oldest first.
func (s *spool) files() []string {
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return nil
	}
	var names []string
	for _, e := range entries {
		if n := e.Name(); strings.HasSuffix(n, spoolExt) && !strings.HasPrefix(n, ".") {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	return names
}

// flush is FlushSpool on st: file by file, oldest first, each removed once
// its events are written, a damaged one renamed *.bad; a write that fails
// leaves the file in the spool.
func (s *spool) flush(ctx context.Context, st Store) (written int, err error) {
	// The common case, on the way of every command: nothing kept.
	if entries, err := os.ReadDir(s.dir); errors.Is(err, fs.ErrNotExist) || err == nil && len(entries) == 0 {
		return 0, nil
	}
	m, err := sharedir.OfSubdir(s.dir)
	if err != nil {
		return 0, err
	}
	s.unclaimStale()
	for _, name := range s.files() {
		path := filepath.Join(s.dir, name)
		claimed := fmt.Sprintf("%s.%d%s", path, time.Now().UnixNano(), claimExt)
		if err := os.Rename(path, claimed); err != nil {
			continue // another flush has it
		}
		evs, err := readSpoolFile(m, claimed)
		if err != nil {
			s.log.Warn("history: damaged spool file set aside; its events are not written", "file", path+badExt, "err", err)
			if os.Rename(claimed, path+badExt) != nil {
				_ = os.Remove(claimed)
			}
			continue
		}
		if err := writeSpooled(ctx, st, evs); err != nil {
			// The file goes back whole: what was written of it is not
			// written again (see recentKeys).
			_ = os.Rename(claimed, path)
			return written, err
		}
		written += len(evs)
		_ = os.Remove(claimed)
	}
	if written > 0 {
		_ = atomicfile.SyncDir(s.dir)
	}
	return written, nil
}

// writeSpooled writes to st, as the Recorder writes its pending events
// (appendValid), the events of evs that their lock's recent history does
// not hold already (see recentKeys).
func writeSpooled(ctx context.Context, st Store, evs []Event) error {
	byLock := map[string]map[Event]bool{}
	var todo []Event
	for _, ev := range evs {
		seen, ok := byLock[ev.Lock]
		if !ok {
			seen = recentKeys(ctx, st, ev.Lock)
			byLock[ev.Lock] = seen
		}
		if !seen[sameKey(ev)] {
			todo = append(todo, ev)
		}
	}
	rest, err := appendValid(ctx, st, todo)
	if len(rest) == 0 {
		return nil // written, but for events refused for good
	}
	return err
}

// recentWindow is how many of a lock's newest events a flush compares its
// events with.
const recentWindow = 256

// recentKeys returns the events of lock's recent history, as sameKey
// compares them: a flush writes only events not among them. A write whose
// answer was lost (the coordinator stalled after it had taken the write)
// was spooled though it was written, and a flush that failed part way
// leaves its file whole; without this look the flush would write them
// twice. When the history cannot be read, none is: every event is written,
// a duplicate, not a loss.
func recentKeys(ctx context.Context, st Store, lock string) map[Event]bool {
	seen := map[Event]bool{}
	have, _ := st.History(ctx, lock, recentWindow)
	for _, ev := range have {
		seen[sameKey(ev)] = true
	}
	return seen
}

// sameKey is ev as compared by a flush (recentKeys): its time to the millisecond (as
// stores keep it), in UTC.
func sameKey(ev Event) Event {
	ev.Time = time.UnixMilli(ev.Time.UnixMilli()).UTC()
	return ev
}

// readSpoolFile reads the events of a spool file: every line a valid
// event with its time, else the file is damaged.
func readSpoolFile(m sharedir.Mode, path string) ([]Event, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if err := m.CheckOpen("history spool file", f); err != nil {
		return nil, err
	}
	var evs []Event
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 4096), maxLine)
	for line := 1; sc.Scan(); line++ {
		var ev Event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		if ev.Time.IsZero() {
			return nil, fmt.Errorf("line %d: no time", line)
		}
		if ev, err = Normalize(ev, time.Time{}); err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		evs = append(evs, ev)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return evs, nil
}

// unclaimStale puts back the files claimed by a flush that died before it
// finished (long ago: a flush is bounded by its timeout), and removes the
// temporary files of a keep that died before its rename.
func (s *spool) unclaimStale() {
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		n := e.Name()
		switch {
		case strings.HasSuffix(n, claimExt):
			base, at, ok := strings.Cut(strings.TrimSuffix(n, claimExt), spoolExt+".")
			ns, err := strconv.ParseInt(at, 10, 64)
			if ok && err == nil && time.Since(time.Unix(0, ns)) > staleClaim {
				_ = os.Rename(filepath.Join(s.dir, n), filepath.Join(s.dir, base+spoolExt))
			}
		case strings.HasPrefix(n, atomicfile.TempPrefix):
			if fi, err := e.Info(); err == nil && time.Since(fi.ModTime()) > staleClaim {
				_ = os.Remove(filepath.Join(s.dir, n))
			}
		}
	}
}
