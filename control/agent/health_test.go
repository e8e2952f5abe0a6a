package agent

import (
	"strings"
	"testing"
	"time"
)

func TestHealth(t *testing.T) {
	t0 := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	a := &Agent{opts: Options{Resync: 10 * time.Second}}
	if err := a.Health(t0); err != nil {
		t.Errorf("not started: %v", err)
	}
	a.started = t0
	if err := a.Health(t0.Add(20 * time.Second)); err != nil {
		t.Errorf("starting, 20 s in: %v", err)
	}
	a.lastErr = "program route 10.71.0.0/16: operation not permitted"
	if err := a.Health(t0.Add(30 * time.Second)); err == nil || !strings.Contains(err.Error(), "operation not permitted") {
		t.Errorf("never succeeded, 30 s in: %v", err)
	}
	a.stats.LastSuccess = t0.Add(40 * time.Second)
	if err := a.Health(t0.Add(60 * time.Second)); err != nil {
		t.Errorf("succeeded 20 s ago: %v", err)
	}
	if err := a.Health(t0.Add(70 * time.Second)); err == nil || !strings.Contains(err.Error(), "for 30s") {
		t.Errorf("last success 30 s ago with a 10 s resync: %v", err)
	}
}
