package agent

import (
	"testing"
	"time"
)

// TestMasqueradeObserve: how readings of the kernel's counter become new connections.
func TestMasqueradeObserve(t *testing.T) {
	var w masqueradeWatch
	now := time.Unix(1000, 0)
	steps := []struct {
		reading  uint64
		replaced bool
		want     uint64
	}{
		{50, false, 0}, // the first reading is history
		{53, false, 3},
		{53, false, 0},
		{2, false, 2},  // went down: someone replaced the table
		{60, true, 60}, // the agent replaced it: all of it is new
		{61, false, 1},
	}
	for i, s := range steps {
		if s.replaced {
			w.replaced()
		}
		if got := w.observe(s.reading, now); got != s.want {
			t.Errorf("step %d: reading %d gave %d new, want %d", i, s.reading, got, s.want)
		}
	}
	if c := w.condition(false, now.Add(MasqueradeMemory+time.Second)); c.Reason != "NotSeen" {
		t.Errorf("after %v without news: %s", MasqueradeMemory, c.Reason)
	}
}
