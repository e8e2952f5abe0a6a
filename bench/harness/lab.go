package harness

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// The lab rung (issue #39): the fabric measured where users run it, inside two lab clusters on
// the real node stack (kubelet, containerd, flannel), skein installed with the chart and
// peered with skeinctl network connect, beside local cross-node pod-to-pod in the same lab and
// bare wireguard-go between a pod and the remote node. bench/e2e's TestPathAccount measures
// it (without its perf run: SKEIN_PATH_ACCOUNT_PERF=0) and writes its runs as LabRuns
// (SKEIN_PATH_ACCOUNT_JSON); the harness reads them and pairs them round by round as the
// ladder pairs its runs.

// The lab's measurements, as TestPathAccount names them, in report order.
const (
	LabLocal          = "local"
	LabLocalReverse   = "local reverse"
	LabFabric         = "fabric"
	LabFabricReverse  = "fabric reverse"
	LabBareWG         = "bare wireguard-go"
	LabBareWGReverse  = "bare wireguard-go reverse"
	labTarget         = 0.50 // issue #39: fabric/local >= 0.50 on one TCP stream, both ways
	labFloor          = 0.30 // and 0.30 is the floor for resolving it
	labLatencyTarget  = 3.0  // latency p50 <= 3x local
	labDefaultRounds  = 5
	labDefaultSeconds = 6
)

// labMeasurements describe each measurement, in report order.
var labMeasurements = []struct{ name, what string }{
	{LabLocal, "one TCP stream between probe pods of cluster 0 on its two nodes (flannel VXLAN, no tunnel)"},
	{LabLocalReverse, "the same, the server sending"},
	{LabFabric, "from a probe pod of cluster 0 to one of cluster 1, both off their gateway's node (as skeinctl bench picks them): the nodes' overlay, two skein gateways and WireGuard between them"},
	{LabFabricReverse, "the same, the pod of cluster 1 sending"},
	{LabBareWG, "stock wireguard-go between the client pod (a TUN device in it) and the remote pod's node (one on its host network), over the same underlay path between the clusters as skein's WireGuard: the bound of any userspace WireGuard here"},
	{LabBareWGReverse, "the same, the node sending"},
}

// labRatios are the ratios the lab rung reports, paired round by round, with their targets.
var labRatios = []struct {
	name, num, den, figure string
	target, floor          float64
	atMost                 bool // the target is an upper bound (latency)
}{
	{"fabric / local", LabFabric, LabLocal, "mbps", labTarget, labFloor, false},
	{"fabric reverse / local reverse", LabFabricReverse, LabLocalReverse, "mbps", labTarget, labFloor, false},
	{"fabric / bare wireguard-go", LabFabric, LabBareWG, "mbps", 0, 0, false},
	{"fabric reverse / bare wireguard-go reverse", LabFabricReverse, LabBareWGReverse, "mbps", 0, 0, false},
	{"latency p50, fabric / local", LabFabric, LabLocal, "p50", labLatencyTarget, 0, true},
}

// LabRuns is what TestPathAccount measured, by measurement name, index i of every list taken
// in round i (the rounds interleave the measurements, alternating their order). It is the
// file between bench/e2e and the harness: both sides use this type.
type LabRuns struct {
	Rounds  int `json:"rounds"`
	Seconds int `json:"seconds"`
	// Placement says which pods and nodes were measured.
	Placement string `json:"placement,omitempty"`
	// Mbps is each round's single-stream TCP throughput.
	Mbps map[string][]float64 `json:"mbps"`
	// CPUPerGB is each round's busy CPU seconds of the whole machine per GB carried.
	CPUPerGB map[string][]float64 `json:"cpuPerGB,omitempty"`
	// P50 and P99 are each round's request/response latency (1 byte), in microseconds
	// (forward measurements only).
	P50 map[string][]float64 `json:"p50,omitempty"`
	P99 map[string][]float64 `json:"p99,omitempty"`
	// Fragments are each round's IP fragments created and reassembly requests, summed over
	// every namespace on the path (nodes, gateway pods, probes, router).
	Fragments map[string][]int64 `json:"fragments,omitempty"`
}

// LabMeasurement is one measurement of the lab rung over its rounds.
type LabMeasurement struct {
	Name        string  `json:"name"`
	Description string  `json:"description"`
	Mbps        Metric  `json:"mbps"`
	CPUPerGB    *Metric `json:"cpuPerGB,omitempty"`
	P50         *Metric `json:"p50,omitempty"`
	P99         *Metric `json:"p99,omitempty"`
	Fragments   []int64 `json:"fragments,omitempty"`
}

// LabRatio is one of labRatios as measured: Ratio is absent when no round paired.
type LabRatio struct {
	Name   string `json:"name"`
	Ratio  *Ratio `json:"ratio,omitempty"`
	Target string `json:"target,omitempty"`
	Floor  string `json:"floor,omitempty"`
	Result string `json:"result,omitempty"`
}

// LabSection is the lab rung in a report.
type LabSection struct {
	Command string `json:"command"`
	// Error says why there are no figures (or what failed after them); Skipped why the test
	// skipped.
	Error        string           `json:"error,omitempty"`
	Skipped      string           `json:"skipped,omitempty"`
	Rounds       int              `json:"rounds,omitempty"`
	Seconds      int              `json:"seconds,omitempty"`
	Placement    string           `json:"placement,omitempty"`
	Measurements []LabMeasurement `json:"measurements,omitempty"`
	Ratios       []LabRatio       `json:"ratios,omitempty"`
}

// labEnv makes TestPathAccount run; labArgs are go test's arguments for it.
const labEnv = "SKEIN_PATH_ACCOUNT=1"

var labArgs = []string{"test", "-count", "1", "-v", "-timeout", "40m", "-run", "^TestPathAccount$", "./bench/e2e/"}

// LabCommand reproduces the lab rung with rounds rounds of seconds each (5-10 minutes for the
// lab to come up; root, and the Kubernetes binaries, helm and the node stack of make
// k8s-binaries).
func LabCommand(rounds, seconds int) string {
	return fmt.Sprintf("%s SKEIN_PATH_ACCOUNT_PERF=0 SKEIN_PATH_ACCOUNT_ROUNDS=%d SKEIN_PATH_ACCOUNT_SECONDS=%d SKEIN_PATH_ACCOUNT_JSON=FILE go %s",
		labEnv, rounds, seconds, strings.Join(quoteArgs(labArgs), " "))
}

// RunLab runs TestPathAccount from the module root (rounds and seconds of 0 take the defaults:
// 5 rounds of 6 s), its output copied to log as it runs, and returns the lab rung. Its lab is
// named by the harness (prefix "slb" and this process's id) and removed with bench/cmd/lab
// if the test left it up.
func RunLab(ctx context.Context, log io.Writer, rounds, seconds int) *LabSection {
	if rounds <= 0 {
		rounds = labDefaultRounds
	}
	if seconds <= 0 {
		seconds = labDefaultSeconds
	}
	command := LabCommand(rounds, seconds)
	dir, err := os.MkdirTemp("", "skein-bench-lab-")
	if err != nil {
		return &LabSection{Command: command, Error: err.Error()}
	}
	defer os.RemoveAll(dir)
	file := filepath.Join(dir, "lab.json")
	out, runErr, downErr, err := runLabTest(ctx, log, "lab", fmt.Sprintf("slb%d", os.Getpid()), labArgs, labEnv, "SKEIN_PATH_ACCOUNT_PREFIX",
		"SKEIN_PATH_ACCOUNT_PERF=0", "SKEIN_PATH_ACCOUNT_ROUNDS="+strconv.Itoa(rounds),
		"SKEIN_PATH_ACCOUNT_SECONDS="+strconv.Itoa(seconds), "SKEIN_PATH_ACCOUNT_JSON="+file)
	if err != nil {
		return &LabSection{Command: command, Error: err.Error()}
	}
	js, readErr := os.ReadFile(file)
	if errors.Is(readErr, os.ErrNotExist) {
		js = nil
	} else if readErr != nil {
		return &LabSection{Command: command, Error: readErr.Error()}
	}
	s := parseLab(out, js, runErr, command)
	if downErr != nil {
		s.Error = strings.TrimPrefix(s.Error+"; lab teardown: "+downErr.Error(), "; ")
	}
	return s
}

// parseLab makes the lab rung of TestPathAccount's go test -v output, the JSON it wrote (nil
// when it wrote none) and how it ended. Figures come only from the JSON; without it the
// section says why there are none.
func parseLab(out, js []byte, runErr error, command string) *LabSection {
	s := &LabSection{Command: command}
	lines := strings.Split(string(out), "\n")
	if js == nil {
		if st := testResults(lines)["TestPathAccount"]; st == "SKIP" {
			s.Skipped = oneLine(logOf(lines, "TestPathAccount"), 300)
			return s
		}
		why := "TestPathAccount wrote no figures"
		if runErr != nil {
			why += " (" + runErr.Error() + ")"
		}
		s.Error = why + ": " + oneLine(lastLines(string(out), 6), 600)
		return s
	}
	var runs LabRuns
	if err := json.Unmarshal(js, &runs); err != nil {
		s.Error = "TestPathAccount's figures are not LabRuns (the harness and bench/e2e disagree on its format): " + err.Error()
		return s
	}
	if err := runs.check(); err != nil {
		s.Error = "TestPathAccount's figures: " + err.Error()
		return s
	}
	s.fill(runs)
	if runErr != nil {
		// The figures stand; what failed after them is said too.
		s.Error = "the test failed after its measurements (" + runErr.Error() + "): " + oneLine(lastLines(string(out), 4), 600)
	}
	return s
}

// check reports what makes r figures no measurement gives.
func (r LabRuns) check() error {
	if len(r.Mbps[LabLocal]) == 0 || len(r.Mbps[LabFabric]) == 0 {
		return fmt.Errorf("no %q or no %q throughput", LabLocal, LabFabric)
	}
	for _, m := range []map[string][]float64{r.Mbps, r.CPUPerGB, r.P50, r.P99} {
		for name, v := range m {
			for i, x := range v {
				if math.IsNaN(x) || math.IsInf(x, 0) || x < 0 {
					return fmt.Errorf("%s: round %d is %v, which no measurement gives", name, i+1, x)
				}
			}
		}
	}
	return nil
}

// fill sets s's measurements from runs and computes its ratios.
func (s *LabSection) fill(runs LabRuns) {
	s.Rounds, s.Seconds, s.Placement = runs.Rounds, runs.Seconds, runs.Placement
	opt := func(v []float64) *Metric {
		if len(v) == 0 {
			return nil
		}
		m := summarize(v)
		return &m
	}
	for _, lm := range labMeasurements {
		if len(runs.Mbps[lm.name]) == 0 {
			continue
		}
		s.Measurements = append(s.Measurements, LabMeasurement{Name: lm.name, Description: lm.what,
			Mbps: summarize(runs.Mbps[lm.name]), CPUPerGB: opt(runs.CPUPerGB[lm.name]),
			P50: opt(runs.P50[lm.name]), P99: opt(runs.P99[lm.name]), Fragments: runs.Fragments[lm.name]})
	}
	s.Recompute()
}

// measurement is s's measurement name, or nil.
func (s *LabSection) measurement(name string) *LabMeasurement {
	for i := range s.Measurements {
		if s.Measurements[i].Name == name {
			return &s.Measurements[i]
		}
	}
	return nil
}

// Recompute fills s's ratios from its measurements' runs, paired round by round.
func (s *LabSection) Recompute() {
	s.Ratios = nil
	runsOf := func(m *LabMeasurement, figure string) []float64 {
		switch {
		case m == nil:
			return nil
		case figure == "p50" && m.P50 != nil:
			return m.P50.Runs
		case figure == "mbps":
			return m.Mbps.Runs
		}
		return nil
	}
	for _, lr := range labRatios {
		a, b := runsOf(s.measurement(lr.num), lr.figure), runsOf(s.measurement(lr.den), lr.figure)
		if len(a) == 0 || len(b) == 0 {
			continue
		}
		r := LabRatio{Name: lr.name}
		if lr.target > 0 {
			cmp := ">="
			if lr.atMost {
				cmp = "<="
			}
			r.Target = fmt.Sprintf("%s %.2f", cmp, lr.target)
			if lr.floor > 0 {
				r.Floor = fmt.Sprintf("%s %.2f", cmp, lr.floor)
			}
		}
		if ra, ok := pairedRatio(a, b); ok {
			r.Ratio = &ra
			r.Result = labVerdict(ra, lr.target, lr.floor, lr.atMost)
		} else {
			r.Result = "no round paired"
		}
		s.Ratios = append(s.Ratios, r)
	}
}

// labVerdict says where ratio ra stands against its target and floor (none when target is 0),
// by its mean, and whether its interval settles it.
func labVerdict(ra Ratio, target, floor float64, atMost bool) string {
	if target == 0 {
		return ""
	}
	meets := func(v, bound float64) bool {
		if atMost {
			return v <= bound
		}
		return v >= bound
	}
	sure := func(bound float64) string {
		if ra.Pairs < 2 {
			return " (one round: no interval)"
		}
		if meets(ra.Low, bound) == meets(ra.High, bound) {
			return ""
		}
		return " (its interval reaches across)"
	}
	switch {
	case meets(ra.Mean, target):
		return "meets the target" + sure(target)
	case floor > 0 && meets(ra.Mean, floor):
		return "below the target, above the floor" + sure(target)
	case floor > 0:
		return "below the floor" + sure(floor)
	}
	return "misses the target" + sure(target)
}

// labMarkdown is the lab rung's section, or "" when it did not run.
func (r *Result) labMarkdown() string {
	s := r.Lab
	if s == nil {
		return ""
	}
	var b strings.Builder
	b.WriteString("\n## The lab rung\n\n")
	b.WriteString("The fabric where users run it: two lab clusters on the real node stack (kubelet, containerd, runc, flannel), skein installed with the chart and peered with `skeinctl network connect`, measured by bench/e2e's TestPathAccount without its perf run (the command below reproduces it). ")
	fmt.Fprintf(&b, "One TCP stream per measurement (skein-probe), %d rounds of %d s, the measurements interleaved in each round (their order reversed every other round); request/response latency (1 byte) after them, interleaved too. ", s.Rounds, s.Seconds)
	b.WriteString("Each cell: median [min-max] over the rounds; each ratio is the geometric mean of the round-by-round ratios with its 95% confidence interval, as the ladder's.\n\n")
	fmt.Fprintf(&b, "`%s`\n\n", s.Command)
	switch {
	case s.Skipped != "":
		fmt.Fprintf(&b, "SKIPPED: %s\n", s.Skipped)
		return b.String()
	case len(s.Measurements) == 0:
		fmt.Fprintf(&b, "FAILED: %s\n", s.Error)
		return b.String()
	case s.Error != "":
		fmt.Fprintf(&b, "FAILED after the measurements: %s\n\n", s.Error)
	}
	if s.Placement != "" {
		fmt.Fprintf(&b, "- placement: %s\n", s.Placement)
	}
	for _, m := range s.Measurements {
		fmt.Fprintf(&b, "- **%s**: %s\n", m.Name, m.Description)
	}
	b.WriteString("\n| measurement | TCP 1 stream (Mbit/s) | each round | CPU per GB, whole machine (s) | RR p50 / p99 (us) | IP fragments and reassemblies |\n|---|---|---|---|---|---|\n")
	spread := func(m *Metric) string {
		if m == nil {
			return "-"
		}
		c := format(m.Median)
		if len(m.Runs) > 1 {
			c += fmt.Sprintf(" [%s-%s]", format(m.Min), format(m.Max))
		}
		return c
	}
	for _, m := range s.Measurements {
		rounds := make([]string, len(m.Mbps.Runs))
		for i, v := range m.Mbps.Runs {
			rounds[i] = fmt.Sprintf("%.0f", v)
		}
		lat := "-" // whole microseconds, as measured
		if m.P50 != nil {
			lat = fmt.Sprintf("%.0f / ", m.P50.Median)
			if m.P99 != nil {
				lat += fmt.Sprintf("%.0f", m.P99.Median)
			} else {
				lat += "-"
			}
		}
		frag := "-"
		if m.Fragments != nil {
			var n int64
			for _, f := range m.Fragments {
				n += f
			}
			frag = strconv.FormatInt(n, 10)
		}
		b.WriteString(tableRow(m.Name, spread(&m.Mbps), strings.Join(rounds, ", "), spread(m.CPUPerGB), lat, frag))
	}
	if len(s.Ratios) > 0 {
		b.WriteString("\n| ratio (paired by round) | figure | target (issue #39) | floor | result |\n|---|---|---|---|---|\n")
		for _, ra := range s.Ratios {
			fig := "-"
			if ra.Ratio != nil {
				fig = ra.Ratio.String()
			}
			b.WriteString(tableRow(ra.Name, fig, ra.Target, ra.Floor, ra.Result))
		}
	}
	return b.String()
}
