package syncbuf

import (
	"strings"
	"sync"
	"testing"
)

// TestConcurrent: writes from many goroutines all land, whole, while others
// read (run with -race).
func TestConcurrent(t *testing.T) {
	var b Buffer
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(2)
		go func() {
			defer wg.Done()
			for range 100 {
				b.Write([]byte("abc\n"))
			}
		}()
		go func() {
			defer wg.Done()
			for range 100 {
				_ = b.String()
			}
		}()
	}
	wg.Wait()
	if got := b.String(); len(got) != 8*100*4 || strings.Count(got, "abc\n") != 800 {
		t.Fatalf("%d bytes, %d lines", len(got), strings.Count(got, "abc\n"))
	}
	tail, off := b.Since(3200 - 4)
	if string(tail) != "abc\n" || off != 3200 {
		t.Fatalf("Since = %q, %d", tail, off)
	}
}
