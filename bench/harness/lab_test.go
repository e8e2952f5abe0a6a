package harness

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// labPassed is go test -v's output of a TestPathAccount that passed (its report cut short).
const labPassed = `=== RUN   TestPathAccount
    e2e_test.go:55: lab: 2 clusters x 2 nodes up in 301.2s
    e2e_test.go:55: round 1 local: 11484 Mbit/s; CPU busy 1.80 of 2 (softirq 0.40); gateways 0.00, 0.00 cores
--- PASS: TestPathAccount (612.40s)
PASS
ok  	github.com/skein-net/skein/bench/e2e	615.002s
`

func readLabRuns(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "lab-runs.json"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestParseLab: the rounds TestPathAccount wrote become the six measurements in report order,
// each summarised over its rounds, and the ratios paired round by round (the expected
// figures computed apart from the harness: geometric mean of the per-round ratios, Student's
// t with 2 degrees of freedom on their logarithms).
func TestParseLab(t *testing.T) {
	s := parseLab([]byte(labPassed), readLabRuns(t), nil, "CMD")
	if s.Error != "" || s.Skipped != "" {
		t.Fatalf("error %q, skipped %q", s.Error, s.Skipped)
	}
	if s.Rounds != 3 || s.Seconds != 6 || !strings.Contains(s.Placement, "c0-n0") || s.Command != "CMD" {
		t.Errorf("rounds %d, seconds %d, placement %q, command %q", s.Rounds, s.Seconds, s.Placement, s.Command)
	}
	var names []string
	for _, m := range s.Measurements {
		names = append(names, m.Name)
		if m.Description == "" {
			t.Errorf("%s: no description", m.Name)
		}
	}
	if got, want := strings.Join(names, ", "), "local, local reverse, fabric, fabric reverse, bare wireguard-go, bare wireguard-go reverse"; got != want {
		t.Fatalf("measurements %s, want %s", got, want)
	}
	fab := s.measurement(LabFabric)
	if fab.Mbps.Median != 1039 || fab.Mbps.Min != 1011 || fab.Mbps.Max != 1115 || len(fab.Mbps.Runs) != 3 || fab.Mbps.Runs[0] != 1115 {
		t.Errorf("fabric: %+v, want median 1039 of 1115, 1011, 1039 in round order", fab.Mbps)
	}
	if fab.P50 == nil || fab.P50.Median != 258 || fab.P99 == nil || fab.P99.Median != 988 || fab.CPUPerGB == nil || fab.CPUPerGB.Median != 12.95 {
		t.Errorf("fabric: p50 %v, p99 %v, CPU per GB %v", fab.P50, fab.P99, fab.CPUPerGB)
	}
	if rev := s.measurement(LabFabricReverse); rev.P50 != nil || len(rev.Fragments) != 3 {
		t.Errorf("fabric reverse: p50 %v (none measured), fragments %v", rev.P50, rev.Fragments)
	}
	want := map[string]string{
		"fabric / local":                             "0.08x [0.06-0.13] below the floor",
		"fabric reverse / local reverse":             "0.09x [0.06-0.12] below the floor",
		"fabric / bare wireguard-go":                 "0.68x [0.57-0.81] ",
		"fabric reverse / bare wireguard-go reverse": "0.65x [0.50-0.85] ",
		"latency p50, fabric / local":                "7.10x [5.76-8.76] misses the target",
	}
	if len(s.Ratios) != len(want) {
		t.Errorf("%d ratios, want %d: %+v", len(s.Ratios), len(want), s.Ratios)
	}
	for _, r := range s.Ratios {
		if r.Ratio == nil {
			t.Errorf("%s: no ratio", r.Name)
			continue
		}
		if got := r.Ratio.String() + " " + r.Result; got != want[r.Name] {
			t.Errorf("%s: %q, want %q", r.Name, got, want[r.Name])
		}
		if r.Ratio.Pairs != 3 {
			t.Errorf("%s: %d pairs, want 3", r.Name, r.Ratio.Pairs)
		}
	}
	if r := s.Ratios[0]; r.Target != ">= 0.50" || r.Floor != ">= 0.30" {
		t.Errorf("fabric / local: target %q, floor %q", r.Target, r.Floor)
	}
	if r := s.Ratios[4]; r.Target != "<= 3.00" || r.Floor != "" {
		t.Errorf("latency: target %q, floor %q", r.Target, r.Floor)
	}

	// Without the bare wireguard-go runs (no wg on the machine) their ratios are left out.
	var runs LabRuns
	if err := json.Unmarshal(readLabRuns(t), &runs); err != nil {
		t.Fatal(err)
	}
	delete(runs.Mbps, LabBareWG)
	delete(runs.Mbps, LabBareWGReverse)
	js, _ := json.Marshal(runs)
	s = parseLab([]byte(labPassed), js, nil, "CMD")
	if len(s.Measurements) != 4 || len(s.Ratios) != 3 {
		t.Errorf("without bare wireguard-go: %d measurements, %d ratios; want 4 and 3 (%+v)", len(s.Measurements), len(s.Ratios), s.Ratios)
	}
}

// TestParseLabFailures: a run that measured nothing says why, never with figures it did not
// measure; figures measured before a failure stand, with the failure said.
func TestParseLabFailures(t *testing.T) {
	skipped := "=== RUN   TestPathAccount\n    pathaccount_test.go:46: the path account runs on request (SKEIN_PATH_ACCOUNT=1): it loads the machine for minutes\n--- SKIP: TestPathAccount (0.00s)\nPASS\n"
	failed := "=== RUN   TestPathAccount\n    e2e_test.go:80: helm is not in the cache: run make k8s-binaries\n--- FAIL: TestPathAccount (1.20s)\nFAIL\nexit status 1\n"
	good := readLabRuns(t)
	exit1 := errors.New("exit status 1")
	for _, c := range []struct {
		name     string
		out, js  string
		runErr   error
		skipped  string
		err      string
		measured bool
	}{
		{name: "skipped", out: skipped, skipped: "runs on request"},
		{name: "failed before measuring", out: failed, runErr: exit1, err: "TestPathAccount wrote no figures (exit status 1): "},
		{name: "failed, its reason kept", out: failed, runErr: exit1, err: "helm is not in the cache"},
		{name: "no output", runErr: exit1, err: "wrote no figures (exit status 1)"},
		{name: "not JSON", out: labPassed, js: "round 1 local: 11484", err: "not LabRuns"},
		{name: "another JSON", out: labPassed, js: `{"rounds": 3, "mbps": {"local": [1]}}`, err: `no "local" or no "fabric" throughput`},
		{name: "negative", out: labPassed, js: `{"mbps": {"local": [1, 2], "fabric": [1, -2]}}`, err: "fabric: round 2 is -2"},
		{name: "failed after measuring", out: failed, js: string(good), runErr: exit1, err: "the test failed after its measurements (exit status 1)", measured: true},
	} {
		var js []byte
		if c.js != "" {
			js = []byte(c.js)
		}
		s := parseLab([]byte(c.out), js, c.runErr, "CMD")
		if got := len(s.Measurements) > 0; got != c.measured {
			t.Errorf("%s: measured %v, want %v: %+v", c.name, got, c.measured, s)
		}
		if c.skipped != "" && !strings.Contains(s.Skipped, c.skipped) || c.skipped == "" && s.Skipped != "" {
			t.Errorf("%s: skipped %q, want %q", c.name, s.Skipped, c.skipped)
		}
		if c.err != "" && !strings.Contains(s.Error, c.err) || c.err == "" && s.Error != "" {
			t.Errorf("%s: error %q, want %q", c.name, s.Error, c.err)
		}
		if s.Command != "CMD" {
			t.Errorf("%s: command %q", c.name, s.Command)
		}
	}
}

// TestLabVerdict: a ratio is set against its target and floor by its mean, and the interval
// is said when it reaches across the bound that decides.
func TestLabVerdict(t *testing.T) {
	for _, c := range []struct {
		ra            Ratio
		target, floor float64
		atMost        bool
		want          string
	}{
		{Ratio{Mean: 0.62, Low: 0.55, High: 0.70, Pairs: 5}, 0.5, 0.3, false, "meets the target"},
		{Ratio{Mean: 0.52, Low: 0.45, High: 0.60, Pairs: 5}, 0.5, 0.3, false, "meets the target (its interval reaches across)"},
		{Ratio{Mean: 0.40, Low: 0.35, High: 0.45, Pairs: 5}, 0.5, 0.3, false, "below the target, above the floor"},
		{Ratio{Mean: 0.45, Low: 0.40, High: 0.55, Pairs: 5}, 0.5, 0.3, false, "below the target, above the floor (its interval reaches across)"},
		{Ratio{Mean: 0.10, Low: 0.08, High: 0.12, Pairs: 5}, 0.5, 0.3, false, "below the floor"},
		{Ratio{Mean: 0.28, Low: 0.20, High: 0.35, Pairs: 5}, 0.5, 0.3, false, "below the floor (its interval reaches across)"},
		{Ratio{Mean: 0.60, Pairs: 1}, 0.5, 0.3, false, "meets the target (one round: no interval)"},
		{Ratio{Mean: 2.5, Low: 2.0, High: 2.9, Pairs: 3}, 3, 0, true, "meets the target"},
		{Ratio{Mean: 7.1, Low: 5.8, High: 8.8, Pairs: 3}, 3, 0, true, "misses the target"},
		{Ratio{Mean: 0.68, Low: 0.57, High: 0.81, Pairs: 3}, 0, 0, false, ""},
	} {
		if got := labVerdict(c.ra, c.target, c.floor, c.atMost); got != c.want {
			t.Errorf("%v against %v (floor %v, at most %v): %q, want %q", c.ra, c.target, c.floor, c.atMost, got, c.want)
		}
	}
}

// TestLabMarkdown: the lab rung's section in a report of the lab alone (--lab-only) and after
// the ladder: its rows, its ratios with their targets, and what it says when it did not
// measure; its JSON reads back (ReadReport) with the same ratios recomputed.
func TestLabMarkdown(t *testing.T) {
	s := parseLab([]byte(labPassed), readLabRuns(t), nil, "SKEIN_PATH_ACCOUNT=1 go test -run '^TestPathAccount$' ./bench/e2e/")
	alone := NewResult("the lab rung alone (--lab-only)")
	alone.Lab = s
	md := alone.Markdown()
	for _, want := range []string{
		"\n## The lab rung\n",
		"3 rounds of 6 s",
		"`SKEIN_PATH_ACCOUNT=1 go test -run '^TestPathAccount$' ./bench/e2e/`",
		"- placement: client probe-abc on c0-n0",
		"| local | 11847 [11484-14292] | 11484, 14292, 11847 | 0.97 [0.95-1.01] | 35 / 131 | 0 |\n",
		"| fabric | 1039 [1011-1115] | 1115, 1011, 1039 | 12.9 [12.7-13.1] | 258 / 988 | 3 |\n",
		"| fabric reverse | 1012 [896-1094] | 1094, 1012, 896 | 13.8 [13.5-14.1] | - | 0 |\n",
		"| bare wireguard-go | 1539 [1519-1584] | 1519, 1584, 1539 | 8.89 [8.70-9.10] | 127 / 343 | 0 |\n",
		"| fabric / local | 0.08x [0.06-0.13] | >= 0.50 | >= 0.30 | below the floor |\n",
		"| fabric / bare wireguard-go | 0.68x [0.57-0.81] | | | |\n",
		"| latency p50, fabric / local | 7.10x [5.76-8.76] | <= 3.00 | | misses the target |\n",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("the report lacks %q:\n%s", want, md)
		}
	}
	// After the ladder, the same section.
	ladder := result(map[string][]float64{"skein": {2800, 2790, 2810}, "wireguard-go": {3400, 3420, 3390}})
	ladder.Lab = s
	if md := ladder.Markdown(); !strings.Contains(md, "| fabric / local | 0.08x [0.06-0.13]") || strings.Index(md, "## The lab rung") < strings.Index(md, "| metric |") {
		t.Errorf("the ladder's report lacks the lab rung after its table:\n%s", md)
	}
	// No section when it did not run.
	if md := result(map[string][]float64{"skein": {1}, "wireguard-go": {1}}).Markdown(); strings.Contains(md, "lab rung") {
		t.Errorf("a report without the lab rung shows one:\n%s", md)
	}

	// Its JSON reads back, ratios and all, and a report of the lab alone is a report.
	js, err := alone.JSON()
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "lab.json")
	if err := os.WriteFile(p, js, 0o644); err != nil {
		t.Fatal(err)
	}
	back, err := ReadReport(p)
	if err != nil {
		t.Fatal(err)
	}
	back.Lab.Ratios = nil
	back.Recompute()
	if back.Markdown() != md {
		t.Errorf("read back and recomputed, the report differs:\n%s\nwant\n%s", back.Markdown(), md)
	}
	// A lab rung whose summary is not its rounds is refused, as a rung's is.
	edited := strings.Replace(string(js), `"median": 1039`, `"median": 2000`, 1)
	if edited == string(js) {
		t.Fatal("the fabric's median is not in the JSON")
	}
	if err := os.WriteFile(p, []byte(edited), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadReport(p); err == nil || !strings.Contains(err.Error(), `the lab rung's "fabric", mbps: the median is 2000`) {
		t.Errorf("an edited lab rung read back: %v", err)
	}

	// Skipped, failed, and failed after the measurements.
	for _, c := range []struct {
		s    LabSection
		want []string
	}{
		{LabSection{Command: "C", Skipped: "the path account runs on request"}, []string{"SKIPPED: the path account runs on request"}},
		{LabSection{Command: "C", Error: "helm is not in the cache"}, []string{"FAILED: helm is not in the cache"}},
		{func() LabSection { x := *s; x.Error = "exit status 1"; return x }(), []string{"FAILED after the measurements: exit status 1", "| fabric / local | 0.08x"}},
	} {
		r := NewResult("x")
		r.Lab = &c.s
		md := r.Markdown()
		for _, w := range c.want {
			if !strings.Contains(md, w) {
				t.Errorf("the report lacks %q:\n%s", w, md)
			}
		}
		if len(c.s.Measurements) == 0 && strings.Contains(md, "| measurement |") {
			t.Errorf("a lab rung without figures shows a table:\n%s", md)
		}
	}
}

// TestCompareLab: --compare sets the lab rung's measurements against an older report's, by
// name, with the ladder's test (Mann-Whitney U), and names the lab rung when only one report
// has it.
func TestCompareLab(t *testing.T) {
	old := NewResult("old")
	old.Lab = parseLab([]byte(labPassed), readLabRuns(t), nil, "CMD")
	var runs LabRuns
	if err := json.Unmarshal(readLabRuns(t), &runs); err != nil {
		t.Fatal(err)
	}
	// The fabric twice as fast, both ways; everything else as it was.
	for _, name := range []string{LabFabric, LabFabricReverse} {
		for i := range runs.Mbps[name] {
			runs.Mbps[name][i] *= 2
		}
	}
	for i := range runs.P50[LabFabric] {
		runs.P50[LabFabric][i] /= 2
	}
	js, _ := json.Marshal(runs)
	cur := NewResult("new")
	cur.Lab = parseLab([]byte(labPassed), js, nil, "CMD")

	changes := cur.Compare(old)
	byName := map[string]Change{}
	for _, c := range changes {
		byName[c.Rung+" "+c.Metric] = c
	}
	// 6 throughputs, 6 CPU per GB, 3 p50 and 3 p99 (forward only).
	if len(changes) != 18 {
		t.Errorf("%d changes, want 18: %+v", len(changes), changes)
	}
	if c := byName["lab: fabric tcp1"]; c.Old != 1039 || c.New != 2078 || c.Delta != 1 {
		t.Errorf("lab: fabric tcp1: %+v, want 1039 -> 2078 (+100%%)", c)
	}
	if c := byName["lab: fabric rr-p50"]; c.Old != 258 || c.New != 129 {
		t.Errorf("lab: fabric rr-p50: %+v, want 258 -> 129", c)
	}
	if c := byName["lab: local tcp1"]; c.Delta != 0 || c.Significant {
		t.Errorf("lab: local tcp1 did not change: %+v", c)
	}
	if _, ok := byName["lab: fabric reverse rr-p50"]; ok {
		t.Errorf("a latency the lab does not measure was compared")
	}
	md := cur.CompareMarkdown(old)
	// With 3 rounds a side nothing is significant (p >= 0.1), so the fabric's doubling is
	// counted among the unchanged figures, and the report says why.
	if !strings.Contains(md, "18 of 18 figures show no significant change") || !strings.Contains(md, "With 3 runs against 3 the smallest possible p is 0.100") {
		t.Errorf("compare report:\n%s", md)
	}

	// 5 rounds a side: the doubling is significant.
	five := func(r *Result, f float64) {
		for i := range r.Lab.Measurements {
			if r.Lab.Measurements[i].Name == LabFabric {
				r.Lab.Measurements[i].Mbps = summarize([]float64{1000 * f, 1010 * f, 990 * f, 1005 * f, 995 * f})
			}
		}
	}
	five(old, 1)
	five(cur, 2)
	if md := cur.CompareMarkdown(old); !strings.Contains(md, "| lab: fabric | TCP 1 stream (Mbit/s) | 1000 | 2000 | +100.0% |") {
		t.Errorf("the fabric's doubling over 5 rounds is not reported:\n%s", md)
	}

	// Only one report has the lab rung.
	ladder := result(map[string][]float64{"skein": {2800, 2790, 2810}})
	withLab := result(map[string][]float64{"skein": {2800, 2790, 2810}})
	withLab.Lab = cur.Lab
	if md := withLab.CompareMarkdown(ladder); !strings.Contains(md, "rungs only in this report: the lab rung") {
		t.Errorf("the lab rung only in the new report is not named:\n%s", md)
	}
	if md := ladder.CompareMarkdown(withLab); !strings.Contains(md, "rungs only in the old report: the lab rung") {
		t.Errorf("the lab rung only in the old report is not named:\n%s", md)
	}
}
