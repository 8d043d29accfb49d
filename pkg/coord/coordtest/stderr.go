package coordtest

import (
	"bytes"
	"sync"
)

// stderrBuf collects a helper's stderr while the test reads it (a private
// copy of internal/syncbuf, which pkg/ does not import).
type stderrBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *stderrBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *stderrBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
