// Package safebuffer is a bytes.Buffer that several goroutines may write at once: tests hand it
// to a child process as stdout and stderr (exec.Cmd copies each from its own goroutine) and read
// the logs while the process runs. Test infrastructure: only tests and bench import it.
package safebuffer

import (
	"bytes"
	"sync"
)

// Buffer is safe for concurrent use. Its zero value is empty and ready.
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

// String returns what was written so far.
func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
