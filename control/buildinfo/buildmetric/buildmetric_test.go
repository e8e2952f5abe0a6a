package buildmetric

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestCollector(t *testing.T) {
	c := Collector("agent")
	if n := testutil.CollectAndCount(c, "skein_agent_build_info"); n != 1 {
		t.Fatalf("%d series, want 1", n)
	}
	if v := testutil.ToFloat64(c); v != 1 {
		t.Errorf("value %v, want 1", v)
	}
	if probs, err := testutil.CollectAndLint(c); err != nil || len(probs) > 0 {
		t.Errorf("lint: %v %v", probs, err)
	}
}
