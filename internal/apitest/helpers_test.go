package apitest

import (
	"strings"
	"testing"
	"time"
)

// fatalRecorder is a testing.TB whose Fatal records instead of stopping the test.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (f *fatalRecorder) Helper()        {}
func (f *fatalRecorder) Fatal(a ...any) { f.msg = a[0].(string) }

func TestEventually(t *testing.T) {
	n := 0
	Eventually(t, "the third poll", 5*time.Second, func() bool { n++; return n == 3 })
	if n != 3 {
		t.Errorf("polled %d times, want 3", n)
	}
	r := &fatalRecorder{TB: t}
	start := time.Now()
	Eventually(r, "never", 200*time.Millisecond, func() bool { return false }, func() string { return "last: nothing" })
	if time.Since(start) < 200*time.Millisecond || !strings.Contains(r.msg, "never: not within 200ms") || !strings.Contains(r.msg, "last: nothing") {
		t.Errorf("after %v: %q", time.Since(start), r.msg)
	}
}
