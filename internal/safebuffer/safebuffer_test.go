package safebuffer_test

import (
	"strings"
	"sync"
	"testing"

	"github.com/skein-net/skein/internal/safebuffer"
)

// TestConcurrentWriters: writes from several goroutines all arrive whole (run with -race).
func TestConcurrentWriters(t *testing.T) {
	var b safebuffer.Buffer
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				b.Write([]byte("line\n"))
				_ = b.String()
			}
		}()
	}
	wg.Wait()
	if n := strings.Count(b.String(), "line\n"); n != 800 {
		t.Errorf("%d lines, want 800", n)
	}
}
