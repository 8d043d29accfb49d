// Package syncbuf is a bytes.Buffer that goroutines may write and read at
// once: what tests give a process as its stderr, or a logger as its output,
// and read while it runs.
package syncbuf

import (
	"bytes"
	"sync"
)

// Buffer is a bytes.Buffer safe for concurrent use. The zero Buffer is
// empty and ready.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns everything written so far.
func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Since returns a copy of what was written after the first off bytes, and
// the length written so far (the off of the next call).
func (s *Buffer) Since(off int) ([]byte, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.b.Bytes()
	return bytes.Clone(b[off:]), len(b)
}
