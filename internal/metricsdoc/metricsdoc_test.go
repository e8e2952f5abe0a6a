package metricsdoc

import (
	"strings"
	"testing"
)

func TestLoad(t *testing.T) {
	ref, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{"gateway", "agent", "controller"} {
		if _, ok := ref["skein_"+c+"_build_info"]; !ok {
			t.Errorf("no skein_%s_build_info in the reference", c)
		}
	}
	if m := ref["skein_gateway_packets_total"]; !m.Deprecated {
		t.Errorf("skein_gateway_packets_total not marked deprecated: %+v", m)
	}
	names, err := Names()
	if err != nil {
		t.Fatal(err)
	}
	if !names["skein_gateway_probe_round_trip_seconds_bucket"] || names["skein_gateway_probe_rtt_seconds"] {
		t.Errorf("Names: histogram series or deprecation wrong")
	}
}

// TestCheckCatches feeds Check scrapes that disagree with the reference.
func TestCheckCatches(t *testing.T) {
	for name, scrape := range map[string]string{
		"undocumented": "# HELP skein_agent_bogus_total x\n# TYPE skein_agent_bogus_total counter\nskein_agent_bogus_total 1\n",
		"missing":      "",
		"deprecation":  "# HELP skein_agent_reconciles_total Deprecated: gone.\n# TYPE skein_agent_reconciles_total counter\nskein_agent_reconciles_total 1\n",
		"lint":         "# TYPE skein_agent_reconciles_total counter\nskein_agent_reconciles_total 1\n",
	} {
		r := &recorder{}
		Check(r, "agent", scrape)
		if len(r.errs) == 0 {
			t.Errorf("%s: Check found nothing wrong", name)
		}
		if name == "lint" && !strings.Contains(strings.Join(r.errs, "\n"), "promlint") {
			t.Errorf("lint: no promlint problem: %v", r.errs)
		}
	}
}

type recorder struct {
	testing.TB
	errs []string
}

func (r *recorder) Helper()                   {}
func (r *recorder) Errorf(f string, a ...any) { r.errs = append(r.errs, f) }
func (r *recorder) Fatalf(f string, a ...any) { r.errs = append(r.errs, f); panic("fatal") }
func (r *recorder) Fatal(a ...any)            { panic("fatal") }
