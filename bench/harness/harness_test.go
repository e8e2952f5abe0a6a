package harness_test

import (
	"context"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/skein-net/skein/bench/harness"
)

// TestQuick is the CI smoke test of the harness (bench --quick): every rung is built, passes
// traffic and yields every figure; the reports are well formed; nothing is left behind. The
// figures themselves are not judged here.
func TestQuick(t *testing.T) {
	if os.Getenv("SKEIN_SKIP_NETNS") != "" {
		t.Skip("SKEIN_SKIP_NETNS set: the harness needs network namespaces")
	}
	if os.Geteuid() != 0 {
		t.Fatal("the harness needs root (network namespaces); set SKEIN_SKIP_NETNS=1 to skip")
	}
	bin := t.TempDir()
	if err := harness.Prepare(context.Background(), bin); err != nil {
		t.Fatal(err)
	}
	prefix := fmt.Sprintf("sbt%d", os.Getpid()%1000)
	var log strings.Builder
	// The contended rungs of wireguard-go and skein too, so that the paired ratio of skein+hog
	// has its baseline.
	res, err := harness.Run(context.Background(), harness.Options{Quick: true, Prefix: prefix, Log: &log,
		Contention: 0.5, ContentionRungs: []string{"wireguard-go", "skein"}}, bin)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"veth": false, "wireguard-go": true, "kernel-nat": true, "skein": true, "skein-nonat": true}
	contended := map[string]bool{"wireguard-go+hog": true, "skein+hog": true}
	_, perfErr := exec.LookPath("perf")
	for _, r := range res.Rungs {
		if !contended[r.Name] {
			continue
		}
		delete(contended, r.Name)
		if r.Error != "" {
			t.Errorf("rung %s: %s\n%s", r.Name, r.Error, log.String())
			continue
		}
		for _, k := range []string{"tcp1", "tcp1-reverse", "tcp10", "rr-p50", "rr-p99", "cpu-per-gb"} {
			if m, ok := r.Metrics[k]; !ok || m.Median <= 0 {
				t.Errorf("rung %s: %s = %+v, want a positive figure", r.Name, k, m)
			}
		}
		if _, ok := r.Metrics["udp64-pps"]; ok {
			t.Errorf("rung %s measured UDP: contended rungs take only the TCP, latency and CPU figures", r.Name)
		}
		if r.Name == "skein+hog" {
			if ra, ok := r.Ratios["tcp1"]; !ok || ra.Mean <= 0 {
				t.Errorf("skein+hog has no ratio to wireguard-go+hog: %+v", r.Ratios)
			}
		}
	}
	if len(contended) != 0 {
		t.Errorf("contended rungs missing: %v", contended)
	}
	for _, r := range res.Rungs {
		if !want[r.Name] && r.Name != "veth" {
			continue
		}
		if perfErr != nil {
			t.Logf("no CPU breakdown: %v", perfErr)
			break
		}
		if r.Breakdown == nil {
			t.Errorf("rung %s: no CPU breakdown: %s", r.Name, r.BreakdownError)
			continue
		}
		var total float64
		for _, v := range r.Breakdown.PerGB {
			total += v
		}
		if total <= 0 || r.Breakdown.Samples == 0 {
			t.Errorf("rung %s: empty CPU breakdown %+v", r.Name, r.Breakdown)
		}
		// perf records a little before and after the test: allow for the idle work there.
		if c := r.Breakdown.CoresBusy(); c <= 0 || c > 1.15*float64(r.Breakdown.CPUs) {
			t.Errorf("rung %s: %.2f of %d CPUs busy", r.Name, c, r.Breakdown.CPUs)
		}
		if r.Name != "veth" && r.Breakdown.PerGB["crypto"] <= 0 {
			t.Errorf("rung %s: no crypto in the CPU breakdown of a WireGuard path: %+v", r.Name, r.Breakdown.PerGB)
		}
	}
	// The IPv6 rungs: one stream both ways, latency, CPU per GB (and the gateways' idle RSS),
	// skein's set against bare wireguard-go over IPv6.
	ipv6 := map[string]bool{"wireguard-go-ipv6": false, "skein-ipv6": true}
	for _, r := range res.Rungs {
		gw, ok := ipv6[r.Name]
		if !ok {
			continue
		}
		delete(ipv6, r.Name)
		if r.Error != "" {
			t.Errorf("rung %s: %s\n%s", r.Name, r.Error, log.String())
			continue
		}
		keys := []string{"tcp1", "tcp1-reverse", "rr-p50", "rr-p99", "cpu-per-gb"}
		if gw {
			keys = append(keys, "gateway-rss-idle")
		}
		for _, k := range keys {
			if m, ok := r.Metrics[k]; !ok || m.Median <= 0 {
				t.Errorf("rung %s: %s = %+v, want a positive figure", r.Name, k, m)
			}
		}
		if _, ok := r.Metrics["tcp10"]; ok {
			t.Errorf("rung %s measured 10 streams: the IPv6 rungs take one stream, latency and CPU", r.Name)
		}
		if r.Name == "skein-ipv6" {
			if ra, ok := r.Ratios["tcp1"]; !ok || ra.Mean <= 0 {
				t.Errorf("skein-ipv6 has no ratio to wireguard-go-ipv6: %+v", r.Ratios)
			}
		}
	}
	if len(ipv6) != 0 {
		t.Errorf("IPv6 rungs missing: %v", ipv6)
	}
	if len(res.Rungs) != len(want)+2+2 {
		t.Fatalf("%d rungs, want %d", len(res.Rungs), len(want)+2+2)
	}
	for _, r := range res.Rungs {
		if _, ok := want[r.Name]; !ok {
			continue
		}
		if r.Error != "" {
			t.Errorf("rung %s: %s\n%s", r.Name, r.Error, log.String())
			continue
		}
		keys := []string{"tcp1", "tcp1-reverse", "tcp10", "tcp10-reverse", "udp64-pps", "udpmtu-pps", "rr-p50", "rr-p99", "cpu-per-gb"}
		if want[r.Name] {
			keys = append(keys, "gateway-rss-idle", "gateway-anon-idle", "gateway-rss", "gateway-rss-32")
		}
		for _, k := range keys {
			if m, ok := r.Metrics[k]; !ok || m.Median <= 0 {
				t.Errorf("rung %s: %s = %+v, want a positive figure", r.Name, k, m)
			}
		}
	}
	md := res.Markdown()
	for name := range want {
		if !strings.Contains(md, "| "+name+" |") && !strings.Contains(md, " "+name+" |") {
			t.Errorf("markdown has no column for %s:\n%s", name, md)
		}
	}
	js, err := res.JSON()
	if err != nil {
		t.Fatal(err)
	}
	var back harness.Result
	if err := json.Unmarshal(js, &back); err != nil || len(back.Rungs) != len(want)+2+2 {
		t.Errorf("JSON does not read back: %v", err)
	}
	if err := xml.Unmarshal([]byte(res.SVG()), new(struct{ XMLName xml.Name })); err != nil {
		t.Errorf("SVG is not well-formed XML: %v", err)
	}
	out, _ := exec.Command("ip", "netns", "list").Output()
	if strings.Contains(string(out), prefix+"-") {
		t.Errorf("namespaces left behind:\n%s", out)
	}
	t.Logf("\n%s", md)
}
