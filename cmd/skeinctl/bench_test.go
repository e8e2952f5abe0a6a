package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/skein-net/skein/control/probe"
)

func TestBenchFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--duration", "100ms"}, "--duration 100ms: want 1s-10m"},
		{[]string{"--duration", "11m"}, "--duration 11m0s"},
		{[]string{"--streams", "0"}, "--streams 0: want 1-128"},
		{[]string{"--streams", "1,2,3,4,5,6,7,8,9"}, "want 1 to 8 stream counts"},
		{[]string{"-o", "yaml"}, `--output "yaml"`},
		{[]string{"--svg", "/nonexistent/dir/x.svg"}, "--svg /nonexistent/dir/x.svg: no directory /nonexistent/dir"},
		{[]string{"--svg", "/dev/null"}, "--svg /dev/null: not a regular file"},
		{nil, "--remote-kubeconfig is required"},
	} {
		_, err := run(t, append([]string{"bench", "--kubeconfig", "/nonexistent"}, tc.args...)...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want %q", tc.args, err, tc.want)
		}
	}
}

func TestParseProcessMetrics(t *testing.T) {
	text := `# HELP process_cpu_seconds_total Total user and system CPU time spent in seconds.
# TYPE process_cpu_seconds_total counter
process_cpu_seconds_total 12.34
process_resident_memory_bytes 3.3554432e+07
process_resident_memory_bytes_other 1
go_goroutines 12
`
	cpu, rss, err := parseProcessMetrics(text)
	if err != nil || cpu != 12.34 || rss != 32<<20 {
		t.Errorf("got %v %v %v", cpu, rss, err)
	}
	if _, _, err := parseProcessMetrics("go_goroutines 12\n"); err == nil {
		t.Error("metrics without the process collector parsed")
	}
	if _, _, err := parseProcessMetrics("process_cpu_seconds_total x\nprocess_resident_memory_bytes 1\n"); err == nil {
		t.Error("a value that is no number parsed")
	}
	// A peer's /metrics may say anything: what JSON cannot carry, or no CPU time can be, is refused.
	for _, v := range []string{"NaN", "+Inf", "-Inf", "-1"} {
		if _, _, err := parseProcessMetrics("process_cpu_seconds_total " + v + "\nprocess_resident_memory_bytes 1\n"); err == nil {
			t.Errorf("process_cpu_seconds_total %s parsed", v)
		}
	}
}

// TestBenchSVGLeftAlone: a run that measures nothing leaves the --svg file as it was (it
// truncated it, then removed it); a written chart replaces the file whole.
func TestBenchSVGLeftAlone(t *testing.T) {
	path := filepath.Join(t.TempDir(), "chart.svg")
	if err := os.WriteFile(path, []byte("the user's own"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := run(t, "bench", "--kubeconfig", "/nonexistent", "--remote-kubeconfig", "/nonexistent", "--svg", path); err == nil {
		t.Fatal("bench without clusters succeeded")
	}
	if b, err := os.ReadFile(path); err != nil || string(b) != "the user's own" {
		t.Errorf("--svg file after a failed run: %q, %v", b, err)
	}
	if err := writeFileAtomic(path, []byte("<svg/>")); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(path); string(b) != "<svg/>" {
		t.Errorf("after writeFileAtomic: %q", b)
	}
	if m, _ := filepath.Glob(filepath.Join(filepath.Dir(path), ".chart.svg.*")); len(m) != 0 {
		t.Errorf("temporary files left: %v", m)
	}
}

func TestBenchReportOutput(t *testing.T) {
	rep := &benchReport{MTU: 1340, Duration: "5s", ServerAddress: "10.71.1.4", Started: time.Date(2026, 11, 24, 2, 0, 0, 0, time.UTC),
		Client: endpointRef{Cluster: "local", Node: "a1"}, Server: endpointRef{Cluster: "remote", Node: "b1"}, LocalServer: endpointRef{Cluster: "local", Node: "a0"}}
	rep.Figures = []benchFigure{
		{Name: "TCP 1 stream", Unit: "bit/s", Fabric: 612e6, Local: 2.4e9, Ratio: 0.255, Raw: benchRaw{&probe.Throughput{}, &probe.Throughput{}},
			Gateways: gatewayPair{Local: gatewayCost{CPUCores: 0.92, RSSBytes: 35 << 20}, Remote: gatewayCost{CPUCores: 0.85, RSSBytes: 33 << 20}}},
		{Name: "UDP 64-byte packets", Unit: "packet/s", Fabric: 85200, Local: 300000, Ratio: 0.284, Detail: "fabric 3.1% lost, local 0.2% lost",
			Raw: benchRaw{&probe.Rate{}, &probe.Rate{}}, Gateways: gatewayPair{Local: gatewayCost{Error: "no active gateway pod found"}}},
		{Name: "latency p50", Unit: "us", Fabric: 412, Local: 120, Ratio: 3.43, Raw: benchRaw{&probe.Latency{}, &probe.Latency{}}},
	}
	var b strings.Builder
	rep.print(&b)
	out := b.String()
	for _, want := range []string{
		"TCP 1 stream         612 Mbit/s",
		"2.40 Gbit/s",
		"0.92, 0.85 cores",
		"35 MiB, 33 MiB",
		"85.2 kpps (3.1% lost)",
		"300.0 kpps (0.2% lost)",
		"?, 0.00 cores",
		"412 us",
		"gateway metrics not read: no active gateway pod found",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table without %q:\n%s", want, out)
		}
	}
	svg := rep.SVG()
	for _, want := range []string{"<svg", "TCP throughput", ">612<", ">2400<", ">412<", "x3.43", "</svg>"} {
		if !strings.Contains(svg, want) {
			t.Errorf("SVG without %q", want)
		}
	}
}
