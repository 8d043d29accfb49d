// Package localstore is the history store of fence's local backend: one file
// per lock under <state-dir>/history/, one JSON event per line.
//
// # Writing
//
// A write takes an exclusive flock on the lock's sibling lock file for the
// read-modify-write only, appends its events in one write(2) and fsyncs the
// file (and, for a new file, the directory) before it returns: a recorded
// event is durable. Appending keeps a write O(1) in the size of the history;
// once a file holds a quarter more events than the count bound, or a quarter
// of the count bound's worth of events past the age bound (see Slack), it is
// compacted: the events kept are written to a temporary file (0600), fsynced
// and renamed over it, and the directory is fsynced, so a crash leaves the
// old or the new file, never a mix. A file thus never holds more than 1.25
// times the count bound, and reads apply both bounds exactly.
//
// A crash in the middle of an append can leave a last line without its
// newline: readers ignore it, and the next write cuts it off (the events in it
// were never acknowledged). Any other damage (a line that is not a valid
// event of this lock, sequence numbers that do not increase, a symbolic link,
// a file that is not regular, owned by another user or open to group or
// others) is an error wrapping coord.ErrUnavailable, and the file is neither
// read nor written until it is repaired by hand: the store fails closed.
//
// Readers take no lock. Many processes on one host may share a store.
package localstore

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/history"
	"github.com/fence-dev/fence/pkg/history/internal/codec"
	"github.com/fence-dev/fence/pkg/history/internal/trim"

	"github.com/fence-dev/fence/internal/atomicfile"
	"github.com/fence-dev/fence/internal/flock"
)

// Dir is the name of the store's directory inside the state directory.
const Dir = "history"

const (
	dataExt    = ".jsonl"
	lockExt    = ".lock"
	tempPrefix = atomicfile.TempPrefix
)

// maxEscaped is the longest escaped lock name used as a file name; longer
// escapes use a SHA-256 name (the lock name is in every line either way).
const maxEscaped = 200

// Store is a history.Store on files under <state-dir>/history/.
type Store struct {
	dir  string
	opts history.Options

	mu    sync.Mutex
	cache map[string]fileState // by file base: what this process last validated
}

var _ history.Store = (*Store)(nil)

// fileState is what a writer knows of a history file it validated.
type fileState struct {
	dev, ino uint64
	size     int64   // bytes of complete, validated lines
	lines    int     // complete lines
	lastSeq  uint64  // seq of the last line
	times    []int64 // event time of each line (Unix ns), for the age bound
}

// Open opens the store under stateDir, creating stateDir (0700) and its
// history/ directory (0700) when missing. It fails when history/ is a
// symbolic link, not a directory or owned by another user. Options set the
// bounds (history.WithMaxEvents, history.WithMaxAge) and the clock.
func Open(stateDir string, opts ...history.Option) (*Store, error) {
	o, err := history.NewOptions(opts...)
	if err != nil {
		return nil, err
	}
	if stateDir == "" {
		return nil, fmt.Errorf("%w: empty state directory", coord.ErrInvalid)
	}
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return nil, unavailable("history store: %w", err)
	}
	dir := filepath.Join(stateDir, Dir)
	if err := os.Mkdir(dir, 0o700); err == nil {
		if err := atomicfile.SyncDir(stateDir); err != nil {
			return nil, unavailable("history store: %w", err)
		}
	} else if !errors.Is(err, fs.ErrExist) {
		return nil, unavailable("history store: %w", err)
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return nil, unavailable("history store: %w", err)
	}
	if !fi.IsDir() {
		return nil, unavailable("history store: %s is not a directory", dir)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Geteuid() {
		return nil, unavailable("history store: %s is owned by uid %d, not by this user", dir, st.Uid)
	}
	s := &Store{dir: dir, opts: o, cache: map[string]fileState{}}
	s.removeStaleTemps()
	return s, nil
}

// Dir returns the store's directory (<state-dir>/history).
func (s *Store) Dir() string { return s.dir }

// File returns the path of the history file of lock.
func (s *Store) File(lock string) string { return filepath.Join(s.dir, fileBase(lock)+dataExt) }

// Record implements history.Store.
func (s *Store) Record(ctx context.Context, ev coord.HistoryEvent) error {
	return s.Append(ctx, []coord.HistoryEvent{ev})
}

// Append implements history.Store: the events of each lock are written with
// one write and one fsync.
func (s *Store) Append(ctx context.Context, evs []coord.HistoryEvent) error {
	now := s.opts.Now()
	norm := make([]coord.HistoryEvent, 0, len(evs))
	for _, ev := range evs {
		ev, err := history.Normalize(ev, now)
		if err != nil {
			return err
		}
		norm = append(norm, ev)
	}
	locks, byLock := trim.ByLock(norm)
	for _, lock := range locks {
		if err := s.append(ctx, lock, byLock[lock]); err != nil {
			return err
		}
	}
	return nil
}

func (s *Store) append(ctx context.Context, lock string, evs []coord.HistoryEvent) error {
	base := fileBase(lock)
	unlock, err := s.lock(ctx, base)
	if err != nil {
		return err
	}
	defer unlock()
	if err := ctx.Err(); err != nil {
		return err
	}

	path := filepath.Join(s.dir, base+dataExt)
	_, statErr := os.Lstat(path)
	created := errors.Is(statErr, fs.ErrNotExist)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_APPEND|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return openErr(lock, path, err)
	}
	defer f.Close()
	st, torn, err := s.scan(lock, path, f)
	if err != nil {
		return err
	}
	if torn {
		// The tail of an append that never completed: cut it off.
		if err := f.Truncate(st.size); err != nil {
			return unavailable("history of %q: %w", lock, err)
		}
	}

	cut := s.opts.Cutoff()
	var buf bytes.Buffer
	next := st
	for _, ev := range evs {
		if ev.Time.Before(cut) {
			continue // already past the age bound: kept nowhere
		}
		b, err := codec.Encode(next.lastSeq+1, ev)
		if err != nil {
			return err
		}
		buf.Write(b)
		buf.WriteByte('\n')
		next.lastSeq++
		next.lines++
		next.times = append(next.times, ev.Time.UnixNano())
	}
	if buf.Len() == 0 {
		return nil
	}
	if slack := Slack(s.opts.MaxEvents); next.lines > s.opts.MaxEvents+slack || aged(next.times, cut) >= slack {
		return s.compact(lock, base, f, buf.Bytes())
	}
	if _, err := f.Write(buf.Bytes()); err != nil {
		// A partial write is a torn tail, cut off by the next writer.
		s.drop(base)
		return unavailable("history of %q: %w", lock, err)
	}
	if err := f.Sync(); err != nil {
		s.drop(base)
		return unavailable("history of %q: %w", lock, err)
	}
	if created {
		if err := atomicfile.SyncDir(s.dir); err != nil {
			return unavailable("history of %q: %w", lock, err)
		}
	}
	next.size += int64(buf.Len())
	s.keep(base, next)
	return nil
}

// compact rewrites the history of lock with the events it keeps, followed by
// the encoded lines add (which are within the bounds: the result is never
// empty).
func (s *Store) compact(lock, base string, f *os.File, add []byte) error {
	data, err := readAll(f)
	if err != nil {
		return unavailable("history of %q: %w", lock, err)
	}
	path := filepath.Join(s.dir, base+dataExt)
	lines, err := parse(lock, path, append(completeLines(data), add...))
	if err != nil {
		return err
	}
	lines = trim.Kept(s.opts, lines, func(l line) time.Time { return l.ev.Time }, 0)
	var out bytes.Buffer
	st := fileState{lines: len(lines), times: make([]int64, 0, len(lines))}
	for _, l := range lines {
		out.Write(l.raw)
		out.WriteByte('\n')
		st.lastSeq = l.seq
		st.times = append(st.times, l.ev.Time.UnixNano())
	}
	fi, err := atomicfile.Write(path, out.Bytes(), false)
	if err != nil {
		return unavailable("history of %q: %w", lock, err)
	}
	if err := atomicfile.SyncDir(s.dir); err != nil {
		s.drop(base)
		return unavailable("history of %q: %w", lock, err)
	}
	st.size = int64(out.Len())
	if sys, ok := fi.Sys().(*syscall.Stat_t); ok {
		st.dev, st.ino = uint64(sys.Dev), sys.Ino
	}
	s.keep(base, st)
	return nil
}

// scan validates the history file open in f (under the lock) and returns
// its state, and whether it ends with an incomplete line. Lines validated
// before by this process, in the same file, are not read again.
func (s *Store) scan(lock, path string, f *os.File) (fileState, bool, error) {
	fi, err := checkFile(lock, path, f)
	if err != nil {
		return fileState{}, false, err
	}
	sys := fi.Sys().(*syscall.Stat_t)
	size := fi.Size()
	base := strings.TrimSuffix(filepath.Base(path), dataExt)
	s.mu.Lock()
	st, ok := s.cache[base]
	s.mu.Unlock()
	if !ok || st.dev != uint64(sys.Dev) || st.ino != sys.Ino || st.size > size {
		st = fileState{dev: uint64(sys.Dev), ino: sys.Ino}
	}
	st.times = st.times[:len(st.times):len(st.times)] // appends must not share the cached array
	if size == st.size {
		return st, false, nil
	}
	if size-st.size > maxFileSize {
		return fileState{}, false, corrupt(lock, path, "it is too large")
	}
	buf := make([]byte, size-st.size)
	if _, err := f.ReadAt(buf, st.size); err != nil && !errors.Is(err, io.EOF) {
		return fileState{}, false, unavailable("history of %q: %w", lock, err)
	}
	complete := completeLines(buf)
	lines, err := parseAfter(lock, path, complete, st.lastSeq)
	if err != nil {
		return fileState{}, false, err
	}
	for _, l := range lines {
		st.lines++
		st.lastSeq = l.seq
		st.times = append(st.times, l.ev.Time.UnixNano())
	}
	st.size += int64(len(complete))
	return st, len(complete) < len(buf), nil
}

// Slack is how many events beyond maxEvents a history file may hold before
// it is compacted; as many events past the age bound also trigger a
// compaction. Readers never see them.
func Slack(maxEvents int) int { return max(maxEvents/4, 1) }

// aged counts the times before cut.
func aged(times []int64, cut time.Time) int {
	c, n := cut.UnixNano(), 0
	for _, t := range times {
		if t < c {
			n++
		}
	}
	return n
}

func (s *Store) keep(base string, st fileState) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cache[base] = st
}

func (s *Store) drop(base string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.cache, base)
}

// History implements history.Store. It reads and checks the whole file.
func (s *Store) History(ctx context.Context, lock string, limit int) ([]coord.HistoryEvent, error) {
	lines, err := s.read(ctx, lock)
	if err != nil {
		return nil, err
	}
	lines = trim.Kept(s.opts, lines, func(l line) time.Time { return l.ev.Time }, limit)
	out := make([]coord.HistoryEvent, len(lines))
	for i, l := range lines {
		out[i] = l.ev
	}
	return out, nil
}

// Since implements history.Reader.
func (s *Store) Since(ctx context.Context, lock string, after uint64) ([]history.Entry, error) {
	lines, err := s.read(ctx, lock)
	if err != nil {
		return nil, err
	}
	lines = trim.Kept(s.opts, lines, func(l line) time.Time { return l.ev.Time }, 0)
	var out []history.Entry
	for _, l := range lines {
		if l.seq > after {
			out = append(out, history.Entry{Seq: l.seq, Event: l.ev})
		}
	}
	return out, nil
}

// Heads implements history.Reader. It reads the last line of each file.
func (s *Store) Heads(ctx context.Context) ([]history.Head, error) {
	ents, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, unavailable("history store: %w", err)
	}
	var heads []history.Head
	for _, e := range ents {
		name := e.Name()
		if !strings.HasSuffix(name, dataExt) || strings.HasPrefix(name, tempPrefix) {
			continue
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		h, ok, err := s.head(filepath.Join(s.dir, name))
		if err != nil {
			return nil, err
		}
		if ok {
			heads = append(heads, h)
		}
	}
	sort.Slice(heads, func(i, j int) bool { return heads[i].Lock < heads[j].Lock })
	return heads, nil
}

// head reads the lock and seq of the last complete line of a history file.
func (s *Store) head(path string) (history.Head, bool, error) {
	what := filepath.Base(path)
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return history.Head{}, false, nil // removed by hand since the listing
	}
	if err != nil {
		return history.Head{}, false, openErr(what, path, err)
	}
	defer f.Close()
	fi, err := checkFile(what, path, f)
	if err != nil {
		return history.Head{}, false, err
	}
	n := min(fi.Size(), 2*codec.MaxLen+2)
	buf := make([]byte, n)
	if _, err := f.ReadAt(buf, fi.Size()-n); err != nil && !errors.Is(err, io.EOF) {
		return history.Head{}, false, unavailable("history file %s: %w", path, err)
	}
	last := lastLine(completeLines(buf))
	if len(last) == 0 {
		return history.Head{}, false, nil
	}
	seq, ev, err := codec.Decode(last)
	if err != nil {
		return history.Head{}, false, corrupt(what, path, err.Error())
	}
	if fileBase(ev.Lock)+dataExt != filepath.Base(path) {
		return history.Head{}, false, corrupt(what, path, fmt.Sprintf("it holds events of lock %q", ev.Lock))
	}
	return history.Head{Lock: ev.Lock, Seq: seq}, true, nil
}

// read reads and checks the whole history of lock, without the lock file.
func (s *Store) read(ctx context.Context, lock string) ([]line, error) {
	if err := coord.ValidateName(lock); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	path := s.File(lock)
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, openErr(lock, path, err)
	}
	defer f.Close()
	if _, err := checkFile(lock, path, f); err != nil {
		return nil, err
	}
	data, err := readAll(f)
	if err != nil {
		if errors.Is(err, errTooLarge) {
			return nil, corrupt(lock, path, "it is too large")
		}
		return nil, unavailable("history of %q: %w", lock, err)
	}
	return parse(lock, path, completeLines(data))
}

// line is one parsed line of a history file.
type line struct {
	raw []byte
	seq uint64
	ev  coord.HistoryEvent
}

func parse(lock, path string, data []byte) ([]line, error) { return parseAfter(lock, path, data, 0) }

// parseAfter parses complete lines, each an event of lock with a sequence
// number greater than the one before (the first greater than after).
func parseAfter(lock, path string, data []byte, after uint64) ([]line, error) {
	var out []line
	prev := after
	for n := 1; len(data) > 0; n++ {
		i := bytes.IndexByte(data, '\n')
		raw := data[:i]
		data = data[i+1:]
		seq, ev, err := codec.Decode(raw)
		if err != nil {
			return nil, corrupt(lock, path, fmt.Sprintf("line %d: %v", n, err))
		}
		if ev.Lock != lock {
			return nil, corrupt(lock, path, fmt.Sprintf("line %d is an event of lock %q", n, ev.Lock))
		}
		if seq <= prev {
			return nil, corrupt(lock, path, fmt.Sprintf("line %d: sequence number %d does not follow %d", n, seq, prev))
		}
		prev = seq
		out = append(out, line{raw: raw, seq: seq, ev: ev})
	}
	return out, nil
}

// completeLines returns data up to and including its last newline.
func completeLines(data []byte) []byte {
	return data[:bytes.LastIndexByte(data, '\n')+1]
}

// lastLine returns the last line of complete lines, without its newline.
func lastLine(data []byte) []byte {
	data = bytes.TrimSuffix(data, []byte{'\n'})
	return data[bytes.LastIndexByte(data, '\n')+1:]
}

// maxFileSize bounds what is read of one history file: far more than the
// bounds let a file hold, so that a wrong file cannot exhaust memory.
const maxFileSize = 256 << 20

var errTooLarge = errors.New("file too large")

func readAll(f *os.File) ([]byte, error) {
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	data, err := io.ReadAll(io.LimitReader(f, maxFileSize+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxFileSize {
		return nil, errTooLarge
	}
	return data, nil
}

// checkFile checks an open history file: a regular file of this user that
// group and others cannot open.
func checkFile(what, path string, f *os.File) (os.FileInfo, error) {
	fi, err := f.Stat()
	if err != nil {
		return nil, unavailable("history of %q: %w", what, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, corrupt(what, path, "it is not a regular file")
	}
	sys, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return nil, unavailable("history of %q: cannot stat %s", what, path)
	}
	if int(sys.Uid) != os.Geteuid() {
		return nil, corrupt(what, path, fmt.Sprintf("it is owned by uid %d", sys.Uid))
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, corrupt(what, path, fmt.Sprintf("its mode is %v, not 0600", fi.Mode().Perm()))
	}
	return fi, nil
}

func openErr(what, path string, err error) error {
	if errors.Is(err, syscall.ELOOP) {
		return corrupt(what, path, "it is a symbolic link")
	}
	return unavailable("history of %q: %w", what, err)
}

func corrupt(what, path, why string) error {
	return fmt.Errorf("%w: history of %q: bad history file %s (%s); refusing to read or write it",
		coord.ErrUnavailable, what, path, why)
}

func unavailable(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{coord.ErrUnavailable}, args...)...)
}

// lock takes the exclusive flock of a lock's lock file (internal/flock: ctx
// can abandon the wait).
func (s *Store) lock(ctx context.Context, base string) (unlock func(), err error) {
	path := filepath.Join(s.dir, base+lockExt)
	unlock, err = flock.Lock(ctx, path)
	switch {
	case err == nil:
		return unlock, nil
	case ctx.Err() != nil && errors.Is(err, ctx.Err()):
		return nil, err
	}
	return nil, unavailable("history lock %s: %w", path, err)
}

// removeStaleTemps removes temporary files left by a crash in the middle of
// a compaction (older than a minute: younger ones may be in use).
func (s *Store) removeStaleTemps() {
	ents, err := os.ReadDir(s.dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), tempPrefix) {
			continue
		}
		if fi, err := e.Info(); err == nil && time.Since(fi.ModTime()) > time.Minute {
			os.Remove(filepath.Join(s.dir, e.Name()))
		}
	}
}

// fileBase names a lock's files: a reversible escape (bytes other than
// [A-Za-z0-9_.-] as %XX, and a leading '.' as %2E) or, when that would be
// longer than maxEscaped, "~" and the SHA-256 of the name ('~' never appears
// in an escape, so the two forms cannot collide). Every line holds the lock
// name, checked on every read.
func fileBase(lock string) string {
	esc := atomicfile.Escape(lock)
	if len(esc) > maxEscaped {
		sum := sha256.Sum256([]byte(lock))
		return "~" + hex.EncodeToString(sum[:])
	}
	return esc
}
