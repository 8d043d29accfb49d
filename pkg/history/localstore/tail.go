package localstore

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/fence-dev/fence/pkg/history/internal/codec"
)

// tailBlock is the first block readTail reads from a file's end; each
// further block is twice as large as the one before.
const tailBlock = 4 << 10

// readTail reads the end of a file of size bytes, backwards in blocks, until
// what it has read holds at least want complete lines (lines ending with a
// newline and starting after one), or the whole file. It returns the bytes
// from the start of the first of those lines (start: 0, or just after a
// newline) to size: complete lines, then perhaps an incomplete last line.
// The bytes are not checked. It fails with errTooLarge beyond maxFileSize.
func readTail(f *os.File, size int64, want int) (data []byte, start int64, err error) {
	var buf []byte
	pos := size
	for block := int64(tailBlock); ; block *= 2 {
		n := min(block, pos)
		if size-pos+n > maxFileSize {
			return nil, 0, errTooLarge
		}
		chunk := make([]byte, n, n+int64(len(buf)))
		got, err := f.ReadAt(chunk, pos-n)
		switch {
		case err == nil:
		case errors.Is(err, io.EOF) && buf == nil:
			// A writer cut a torn last line off since the size was read:
			// what was read up to there is still the file.
			chunk = chunk[:got]
		default:
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return nil, 0, err
		}
		buf = append(chunk, buf...)
		pos -= n
		if pos == 0 {
			return buf, 0, nil
		}
		if first := bytes.IndexByte(buf, '\n'); first >= 0 && bytes.Count(buf[first+1:], []byte{'\n'}) >= want {
			return buf[first+1:], pos + int64(first) + 1, nil
		}
	}
}

// readEnd reads the end of the history file of lock open in f (size bytes)
// until it holds want complete lines (readTail), and checks the lines it
// returns, each a valid event of lock in sequence: every complete
// line read when all is set, else the last want. It checks the first line
// of the file too, and returns what a write needs to know of the file, and
// whether it ends with an incomplete line.
func readEnd(lock, path string, f *os.File, size int64, want int, all bool) ([]line, fileState, bool, error) {
	data, start, err := readTail(f, size, want)
	if errors.Is(err, errTooLarge) {
		return nil, fileState{}, false, corrupt(lock, path, fmt.Sprintf("it is larger than %d bytes", maxFileSize))
	} else if err != nil {
		return nil, fileState{}, false, unavailable("history of %q: %w", lock, err)
	}
	complete := completeLines(data)
	st := fileState{size: start + int64(len(complete))}
	torn := len(complete) < len(data)
	if len(complete) == 0 {
		return nil, st, torn, nil // empty, or only an incomplete line (start is 0)
	}
	skip := 0
	if !all {
		skip = len(complete) - len(lastLines(complete, want))
	}
	lines, err := parseAt(lock, path, complete[skip:], 0, start+int64(skip))
	if err != nil {
		return nil, fileState{}, false, err
	}
	first := lines[0]
	if first.at > 0 {
		if first, err = firstLine(lock, path, f, first.at, first.seq); err != nil {
			return nil, fileState{}, false, err
		}
	}
	st.lastSeq = lines[len(lines)-1].seq
	st.firstSeq, st.firstTime = first.seq, first.ev.Time.UnixNano()
	return lines, st, torn, nil
}

// firstLine reads, checks and returns the first line of the history of lock
// in f, of which the line at start (> 0) is known: the first line must
// come before it in sequence.
func firstLine(lock, path string, f *os.File, start int64, next uint64) (line, error) {
	raw, _, err := nthLine(lock, path, f, start, 1)
	if err != nil {
		return line{}, err
	}
	if raw == nil {
		return line{}, unavailable("history of %q: %w", lock, io.ErrUnexpectedEOF)
	}
	lines, err := parseAt(lock, path, raw, 0, 0)
	if err != nil {
		return line{}, err
	}
	if lines[0].seq >= next {
		return line{}, corrupt(lock, path, fmt.Sprintf("line 1 has sequence number %d, not below %d of the line at byte %d",
			lines[0].seq, next, start))
	}
	return lines[0], nil
}

// nthLine reads the k-th line (from 1) of the first size bytes of the
// history of lock in f, with its newline, and its offset; nil when there
// are fewer lines.
func nthLine(lock, path string, f *os.File, size int64, k int) ([]byte, int64, error) {
	r := bufio.NewReaderSize(io.NewSectionReader(f, 0, size), codec.MaxLen+1)
	var off int64
	for n := 1; ; n++ {
		raw, err := r.ReadSlice('\n')
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			return nil, 0, corrupt(lock, path, fmt.Sprintf("line %d is more than %d bytes long", n, codec.MaxLen))
		case errors.Is(err, io.EOF):
			return nil, 0, nil
		case err != nil:
			return nil, 0, unavailable("history of %q: %w", lock, err)
		}
		if n == k {
			return raw, off, nil
		}
		off += int64(len(raw))
	}
}

// agedAtLeast tells whether the k-th line of the history of lock in f (of
// st.size bytes of complete lines) is older than cut: with times in the
// order of the lines, as the store writes them, whether k lines are. It
// reads nothing when the first line is not older than cut, and otherwise
// no further than the k-th line, decoding that line only.
func agedAtLeast(lock, path string, f *os.File, st fileState, cut time.Time, k int) (bool, error) {
	if st.lastSeq == 0 || st.firstTime >= cut.UnixNano() {
		return false, nil
	}
	raw, off, err := nthLine(lock, path, f, st.size, k)
	if raw == nil || err != nil {
		return false, err // nil: fewer than k lines
	}
	lines, err := parseAt(lock, path, raw, 0, off)
	if err != nil {
		return false, err
	}
	return lines[0].ev.Time.Before(cut), nil
}
