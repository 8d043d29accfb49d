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

// readFirstLine reads the first line of a file in which a newline is known
// to come before limit, without its newline.
func readFirstLine(f *os.File, limit int64) ([]byte, error) {
	var buf []byte
	for block := int64(512); ; block *= 2 {
		n := min(block, limit, codec.MaxLen+1)
		if n <= int64(len(buf)) {
			return nil, errLongLine
		}
		buf = append(buf, make([]byte, n-int64(len(buf)))...)
		got, err := f.ReadAt(buf, 0)
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, err
		}
		buf = buf[:got]
		if i := bytes.IndexByte(buf, '\n'); i >= 0 {
			return buf[:i], nil
		}
		if got < int(n) {
			return nil, io.ErrUnexpectedEOF
		}
	}
}

var errLongLine = errors.New("line too long")

// firstLine reads, checks and returns the first line of the history of lock
// in f, whose complete lines end before end, and of which the line at start
// (> 0) is known: the first line must come before it in sequence.
func firstLine(lock, path string, f *os.File, start int64, next uint64) (line, error) {
	raw, err := readFirstLine(f, start)
	switch {
	case errors.Is(err, errLongLine):
		return line{}, corrupt(lock, path, fmt.Sprintf("line 1 is more than %d bytes long", codec.MaxLen))
	case err != nil:
		return line{}, unavailable("history of %q: %w", lock, err)
	}
	lines, err := parseAt(lock, path, append(raw, '\n'), 0, 0)
	if err != nil {
		return line{}, err
	}
	if lines[0].seq >= next {
		return line{}, corrupt(lock, path, fmt.Sprintf("line 1 has sequence number %d, not below %d of the line at byte %d",
			lines[0].seq, next, start))
	}
	return lines[0], nil
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
	r := bufio.NewReaderSize(io.NewSectionReader(f, 0, st.size), 64<<10)
	var off int64
	for n := 1; n <= k; n++ {
		raw, err := r.ReadSlice('\n')
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			return false, corrupt(lock, path, fmt.Sprintf("line %d is more than %d bytes long", n, codec.MaxLen))
		case errors.Is(err, io.EOF):
			return false, nil // fewer than k lines
		case err != nil:
			return false, unavailable("history of %q: %w", lock, err)
		}
		if n < k {
			off += int64(len(raw))
			continue
		}
		lines, err := parseAt(lock, path, raw, 0, off)
		if err != nil {
			return false, err
		}
		return lines[0].ev.Time.Before(cut), nil
	}
	return false, nil
}
