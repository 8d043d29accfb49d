// Package localstore is the history store of fence's local backend: one file
// per lock under <state-dir>/history/, one JSON event per line.
//
// # Writing
//
// A write takes an exclusive flock on the lock's sibling lock file for the
// read-modify-write only, appends its events in one write(2) and fsyncs the
// file (and, for a new file, the directory) before it returns: a recorded
// event is durable. The released event of a lease that `fence run` acquired
// is written with the release itself (see AppendRelease). A write reads only
// the file's first line and its tail (see below), so that its cost does not
// grow with the history. Once the
// sequence numbers of a file span a quarter more events than the count bound
// (its lines are at most that many; fewer when a compaction dropped events
// written out of time order from between others), or its slack-th line is
// past the age bound (see slackOf), it is compacted: the whole file is read and
// checked and the events kept replace it atomically (atomicfile.WritePerm:
// a crash leaves the old or the new file, never a mix). A file thus never
// holds more than 1.25 times the count bound, and reads apply both bounds
// exactly.
//
// A crash in the middle of an append can leave a last line without its
// newline: readers ignore it, and the next write cuts it off (the events in it
// were never acknowledged). Any other damage (a line that is not a valid
// event of this lock, sequence numbers that do not increase, a symbolic link,
// a file that is not regular, owned by another user or open to group or
// others) is an error wrapping coord.ErrUnavailable, and the file is not read
// or written past it until it is repaired by hand: the store fails closed.
//
// # What is checked when
//
// The file itself (type, owner, mode, no symbolic link) is checked on every
// read and write. Its lines are checked as they are read:
//
//   - History and Since read and check every line, and so does a
//     compaction, before it writes anything;
//   - a write checks the first line and the lines of the last block of the
//     file (at least 4 KiB, and at least the last complete line): each is a
//     valid event of the lock, their sequence numbers increase, and the
//     first line's is below theirs;
//   - Latest checks the first line and the last lines it needs.
//
// Damage in the middle of a long file is thus not seen by the write that
// follows it, and that write appends after it (it never writes over it);
// every full read refuses the file, and so does the next compaction (after
// at most slack more events), and every write after it. Once a read (History,
// Since, Latest), a write or a compaction of a store has refused a file,
// that store reads the whole file again, for its reads and its writes,
// until it is repaired: damage a store has read is never written after.
//
// Readers take no lock. Many processes on one host may share a store.
package localstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math"
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
	hopts "github.com/fence-dev/fence/pkg/history/internal/opts"
	"github.com/fence-dev/fence/pkg/history/internal/trim"

	"github.com/fence-dev/fence/internal/sharedir"
	"github.com/fence-dev/fence/pkg/internal/atomicfile"
	"github.com/fence-dev/fence/pkg/internal/flock"
)

// dirName is the name of the store's directory inside the state directory.
const dirName = "history"

const (
	dataExt    = ".jsonl"
	lockExt    = ".lock"
	tempPrefix = atomicfile.TempPrefix
)

// maxEscaped is the longest escaped lock name used as a file name (see
// fileBase).
const maxEscaped = 200

// store is a history.Store on files under <state-dir>/history/.
type store struct {
	dir   string
	opts  hopts.Options
	share sharedir.Mode // how the state directory is shared

	mu  sync.Mutex
	bad map[string]bool // by file base: files this store found damaged
}

var _ history.Store = (*store)(nil)

// fileState is what a writer knows of a history file it checked.
type fileState struct {
	size      int64  // bytes of complete lines
	lastSeq   uint64 // seq of the last line (0: the file has no line)
	firstSeq  uint64 // seq of the first line
	firstTime int64  // event time of the first line (Unix ns), for the age bound
}

// Open opens the store under stateDir, creating stateDir (0700) and its
// history/ directory (0700) when missing. It fails when history/ is a
// symbolic link, not a directory or owned by another user. Options set the
// bounds (the tests' historytest.WithMaxEvents, WithMaxAge) and the clock.
func Open(stateDir string, opts ...history.Option) (history.Store, error) {
	o, err := hopts.New(opts...)
	if err != nil {
		return nil, err
	}
	if stateDir == "" {
		return nil, fmt.Errorf("%w: empty state directory", coord.ErrInvalid)
	}
	dir := filepath.Join(stateDir, dirName)
	share, err := sharedir.OfSubdir(dir)
	if err != nil {
		return nil, unavailable("history store: %w", err)
	}
	return &store{dir: dir, opts: o, share: share, bad: map[string]bool{}}, nil
}

// File returns the path of the history file of lock.
func (s *store) File(lock string) string { return filepath.Join(s.dir, fileBase(lock)+dataExt) }

// Record implements history.Store.
func (s *store) Record(ctx context.Context, ev history.Event) error {
	return s.Append(ctx, []history.Event{ev})
}

// Append implements history.Store: the events of each lock are written with
// one write and one fsync.
func (s *store) Append(ctx context.Context, evs []history.Event) error {
	return trim.EachLock(ctx, s.opts, evs, func(ctx context.Context, lock string, evs []history.Event) error {
		sync, err := s.appendLater(ctx, lock, evs)
		if err != nil {
			return err
		}
		return sync()
	})
}

// appendLater writes evs, events of lock within the age bound (at least
// one), and returns before their fsync, which sync does (once, whatever the
// error): AppendRelease releases in between. The flock is not held between
// the write and the fsync.
func (s *store) appendLater(ctx context.Context, lock string, evs []history.Event) (sync func() error, err error) {
	done := func() error { return nil }
	base := fileBase(lock)
	unlock, err := s.lock(ctx, base)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if err := ctx.Err(); err != nil {
		return nil, err
	}

	path := filepath.Join(s.dir, base+dataExt)
	_, statErr := os.Lstat(path)
	created := errors.Is(statErr, fs.ErrNotExist)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_APPEND|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, openErr(lock, path, err)
	}
	keepOpen := false // for the fsync put off
	defer func() {
		if !keepOpen {
			f.Close()
		}
	}()
	if created {
		if err := s.share.Created(int(f.Fd())); err != nil {
			return nil, unavailable("history of %q: %w", lock, err)
		}
	}
	// The file's tail and first line (see the package doc).
	fi, err := s.checkFile(lock, path, f)
	if err != nil {
		return nil, err
	}
	_, st, torn, err := s.readFile(lock, path, base, f, fi.Size(), 1, true)
	if err != nil {
		return nil, err
	}
	if torn {
		// The tail of an append that never completed: cut it off.
		if err := f.Truncate(st.size); err != nil {
			return nil, unavailable("history of %q: %w", lock, err)
		}
	}

	cut := s.opts.Cutoff()
	add := make([]line, len(evs))
	for i, ev := range evs {
		seq := st.lastSeq + 1 + uint64(i)
		b, err := codec.Encode(seq, ev)
		if err != nil {
			return nil, err
		}
		add[i] = line{raw: b, seq: seq, ev: ev}
	}
	// The sequence numbers of the file once written span (at least as many
	// as its lines) from its first line's (1 for an empty file) to the last
	// added.
	slack := slackOf(s.opts.MaxEvents)
	compact := int(add[len(add)-1].seq-max(st.firstSeq, 1)+1) > s.opts.MaxEvents+slack
	if !compact {
		if compact, err = agedAtLeast(lock, path, f, st, cut, slack); err != nil {
			return nil, err
		}
	}
	if compact {
		if err := s.compact(lock, base, f, st, add); err != nil {
			return nil, err
		}
		return done, nil // written durably
	}
	if _, err := f.Write(joined(add)); err != nil {
		// A partial write is a torn tail, cut off by the next writer.
		return nil, unavailable("history of %q: %w", lock, err)
	}
	keepOpen = true
	return func() error {
		defer f.Close()
		if err := f.Sync(); err != nil {
			return unavailable("history of %q: %w", lock, err)
		}
		if created {
			if err := atomicfile.SyncDir(s.dir); err != nil {
				return unavailable("history of %q: %w", lock, err)
			}
		}
		return nil
	}, nil
}

// compact rewrites the history of lock (open in f, of st.size bytes of
// complete lines) with the events it keeps, read and checked whole,
// followed by the lines add, numbered after them (and within the bounds:
// the result is never empty).
func (s *store) compact(lock, base string, f *os.File, st fileState, add []line) error {
	path := filepath.Join(s.dir, base+dataExt)
	lines, _, _, err := s.readFile(lock, path, base, f, st.size, math.MaxInt, true)
	if err != nil {
		return err
	}
	lines = s.kept(append(lines, add...), 0)
	s.removeStaleTemps()
	if _, err := atomicfile.WritePerm(path, joined(lines), false, s.share.FilePerm()); err != nil {
		return unavailable("history of %q: %w", lock, err)
	}
	if err := atomicfile.SyncDir(s.dir); err != nil {
		return unavailable("history of %q: %w", lock, err)
	}
	return nil
}

// readFile reads and checks the history of lock open in f (named base,
// size bytes) with readEnd: its last want lines (math.MaxInt: every line),
// or every line when this store found the file damaged before (see the
// package doc: What is checked when).
func (s *store) readFile(lock, path, base string, f *os.File, size int64, want int, all bool) ([]line, fileState, bool, error) {
	s.mu.Lock()
	if s.bad[base] {
		want = math.MaxInt
	}
	s.mu.Unlock()
	lines, st, torn, err := readEnd(lock, path, f, size, want, all)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.bad[base] = true
	} else if want == math.MaxInt {
		delete(s.bad, base)
	}
	return lines, st, torn, err
}

// slackOf is how many events beyond maxEvents a history file may hold before
// it is compacted; as many events past the age bound at the start of the
// file also trigger a compaction. Readers never see them.
func slackOf(maxEvents int) int { return max(maxEvents/4, 1) }

// Latest returns what History(ctx, lock, n) returns, the lock's last n kept
// events (n > 0), reading only the end of the file and checking only the
// lines it reads (a lock's recent events, on every acquisition, should not
// cost a read of its whole history). It reads the whole file when the last
// n events are not all within the age bound, when n is 0, and when this
// store found the file damaged (what it checks: see the package doc).
func (s *store) Latest(ctx context.Context, lock string, n int) ([]history.Event, error) {
	want := min(n, s.opts.MaxEvents)
	if n <= 0 {
		want = math.MaxInt
	}
	lines, err := s.read(ctx, lock, want)
	if err != nil {
		return nil, err
	}
	earlier := len(lines) > 0 && lines[0].at > 0 // the file holds lines before these
	lines = s.kept(lines, n)
	if len(lines) < want && earlier {
		return s.History(ctx, lock, n) // events past the age bound among the last ones
	}
	return events(lines), nil
}

// kept is what the bounds keep of lines: the last limit of them (0: all).
func (s *store) kept(lines []line, limit int) []line {
	return trim.Kept(s.opts, lines, func(l line) time.Time { return l.ev.Time }, limit)
}

func events(lines []line) []history.Event {
	out := make([]history.Event, len(lines))
	for i, l := range lines {
		out[i] = l.ev
	}
	return out
}

// History implements history.Store. It reads and checks the whole file.
func (s *store) History(ctx context.Context, lock string, limit int) ([]history.Event, error) {
	lines, err := s.read(ctx, lock, math.MaxInt)
	if err != nil {
		return nil, err
	}
	lines = s.kept(lines, limit)
	return events(lines), nil
}

// Since implements history.Store.
func (s *store) Since(ctx context.Context, lock string, after uint64) ([]history.Entry, error) {
	lines, err := s.read(ctx, lock, math.MaxInt)
	if err != nil {
		return nil, err
	}
	lines = s.kept(lines, 0)
	var out []history.Entry
	for _, l := range lines {
		if l.seq > after {
			out = append(out, history.Entry{Seq: l.seq, Event: l.ev})
		}
	}
	return out, nil
}

// Heads implements history.Store. It reads the last line of each file.
func (s *store) Heads(ctx context.Context) ([]history.Head, error) {
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
func (s *store) head(path string) (history.Head, bool, error) {
	what := filepath.Base(path)
	f, fi, err := s.open(what, path)
	if f == nil || err != nil {
		return history.Head{}, false, err // nil: removed by hand since the listing
	}
	defer f.Close()
	buf, _, err := readTail(f, fi.Size(), 1)
	if errors.Is(err, errTooLarge) {
		return history.Head{}, false, corrupt(what, path, "its last line is too large")
	}
	if err != nil {
		return history.Head{}, false, unavailable("history file %s: %w", path, err)
	}
	last := bytes.TrimSuffix(lastLines(completeLines(buf), 1), []byte{'\n'})
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

// read reads and checks the last want lines of the history of lock
// (math.MaxInt: every line) and its first line, without the lock file (see
// readFile).
func (s *store) read(ctx context.Context, lock string, want int) ([]line, error) {
	if err := coord.ValidateName(lock); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	path := s.File(lock)
	f, fi, err := s.open(lock, path)
	if f == nil || err != nil {
		return nil, err
	}
	defer f.Close()
	lines, _, _, err := s.readFile(lock, path, fileBase(lock), f, fi.Size(), want, false)
	return lines, err
}

// open opens and checks the history file of lock at path for reading; a
// missing file is nil and no error.
func (s *store) open(lock, path string) (*os.File, os.FileInfo, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, openErr(lock, path, err)
	}
	fi, err := s.checkFile(lock, path, f)
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return f, fi, nil
}

// line is one parsed line of a history file.
type line struct {
	raw []byte
	at  int64 // offset in the file
	seq uint64
	ev  history.Event
}

// parseAt parses complete lines that start at byte offset at of the file,
// each an event of lock with a sequence number greater than the one before
// (the first greater than after). Errors name a line by its number when at
// is 0, by its offset otherwise.
func parseAt(lock, path string, data []byte, after uint64, at int64) ([]line, error) {
	var out []line
	prev := after
	numbered := at == 0
	for n := 1; len(data) > 0; n++ {
		i := bytes.IndexByte(data, '\n')
		raw := data[:i]
		lineAt := at
		where := func() string {
			if numbered {
				return fmt.Sprintf("line %d", n)
			}
			return fmt.Sprintf("the line at byte %d", lineAt)
		}
		at += int64(i) + 1
		data = data[i+1:]
		seq, ev, err := codec.Decode(raw)
		if err != nil {
			return nil, corrupt(lock, path, fmt.Sprintf("%s: %v", where(), err))
		}
		if ev.Lock != lock {
			return nil, corrupt(lock, path, fmt.Sprintf("%s is an event of lock %q", where(), ev.Lock))
		}
		if seq <= prev {
			return nil, corrupt(lock, path, fmt.Sprintf("%s: sequence number %d does not follow %d", where(), seq, prev))
		}
		prev = seq
		out = append(out, line{raw: raw, at: lineAt, seq: seq, ev: ev})
	}
	return out, nil
}

// joined is the lines as a file holds them, each ended by a newline.
func joined(lines []line) []byte {
	var b bytes.Buffer
	for _, l := range lines {
		b.Write(l.raw)
		b.WriteByte('\n')
	}
	return b.Bytes()
}

// completeLines returns data up to and including its last newline.
func completeLines(data []byte) []byte {
	return data[:bytes.LastIndexByte(data, '\n')+1]
}

// lastLines returns the last n of complete lines (all when there are fewer).
func lastLines(data []byte, n int) []byte {
	end := len(data) - 1 // the last line's newline
	for ; n > 0 && end >= 0; n-- {
		end = bytes.LastIndexByte(data[:end], '\n')
	}
	return data[end+1:]
}

// maxFileSize bounds what is read of one history file: far more than the
// bounds let a file hold, so that a wrong file cannot exhaust memory.
const maxFileSize = 256 << 20

var errTooLarge = errors.New("file too large")

// checkFile checks an open history file: a regular file of this user that
// group and others cannot open (0600), or, in a shared state directory, the
// group's file, 0660 (sharedir.Mode.CheckFile).
func (s *store) checkFile(what, path string, f *os.File) (os.FileInfo, error) {
	fi, err := f.Stat()
	if err != nil {
		return nil, unavailable("history of %q: %w", what, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, corrupt(what, path, "it is not a regular file")
	}
	if err := s.share.CheckOpen("history file", f); err != nil {
		return nil, corrupt(what, path, err.Error())
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
func (s *store) lock(ctx context.Context, base string) (unlock func(), err error) {
	path := filepath.Join(s.dir, base+lockExt)
	unlock, err = flock.LockPerm(ctx, path, s.share.FilePerm())
	switch {
	case err == nil:
		return unlock, nil
	case ctx.Err() != nil && errors.Is(err, ctx.Err()):
		return nil, err
	}
	return nil, unavailable("history lock %s: %w", path, err)
}

// removeStaleTemps removes temporary files left by a crash in the middle of
// a compaction (older than a minute: younger ones may be in use). Only a
// compaction makes them, and only a compaction calls it: it lists the whole
// directory, which Open, on the path of every fence command, should not.
func (s *store) removeStaleTemps() {
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

// fileBase names a lock's files (atomicfile.FileBase: its escape, or past
// maxEscaped "~" and its SHA-256). Every line holds the lock name, checked
// on every read.
func fileBase(lock string) string { return atomicfile.FileBase(lock, maxEscaped, "~") }

// AppendRelease is the history Recorder's one-step release (its contract:
// history.releaseAppender) on the local coordinator of the state directory
// this store is in (package local's ReleaseWith): ev is appended under the
// lock's flock, once the lease is found to hold the lock and before the
// release is written, so that it precedes the next holder's acquisition
// without a read of the lock beforehand. Its fsync comes after the release
// (before AppendRelease returns, whose error it may be): the next holder
// need not wait for the disk, and its own records, appended after this one,
// are durable only with it.
func (s *store) AppendRelease(ctx context.Context, c coord.Coordinator, leaseID string, token uint64, ev history.Event) (done bool, err error) {
	lc, ok := c.(interface { // package local's coordinator
		Dir() string
		ReleaseWith(ctx context.Context, name, leaseID string, token uint64, before func() error) (bool, error)
	})
	if !ok || filepath.Clean(filepath.Join(lc.Dir(), dirName)) != filepath.Clean(s.dir) {
		return false, nil
	}
	if ev, err = history.Normalize(ev, s.opts.Now()); err != nil {
		return false, err
	}
	if ev.Time.Before(s.opts.Cutoff()) {
		return false, nil // kept nowhere: nothing to write with the release
	}
	var sync func() error
	var werr error
	held, err := lc.ReleaseWith(ctx, ev.Lock, leaseID, token, func() error {
		sync, werr = s.appendLater(ctx, ev.Lock, []history.Event{ev})
		return werr
	})
	if sync == nil { // not held, or the event was not written: nothing was released
		if werr != nil || !held {
			return false, werr
		}
		return false, err
	}
	if serr := sync(); err == nil {
		err = serr
	}
	return true, err
}
