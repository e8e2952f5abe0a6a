//go:build linux

package appliance_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// idleSettle is how long the gateways stay idle and connected before their RSS is read.
const idleSettle = 3 * time.Second

// BenchmarkIdleRSS reports the RSS of two standalone gateways (the real binary, as nobody, in
// namespaces, as BenchmarkTCPStream runs them) connected and idle: each iteration starts a
// fresh pair, waits until both say Connected, leaves them idle for a few seconds, scrapes
// their /metrics once (as Prometheus would) and reads /proc/PID/status: VmRSS (the larger of
// the two), and its anonymous part (the gateway's own memory) and file part (the executable's
// pages, shared by every gateway running the same binary). SKEIN_BENCH_MEMDIR=dir also keeps
// each gateway's heap profile, smaps and metrics there; SKEIN_BENCH_IDLE overrides the idle
// time. Run with
//
//	go test -run XXX -bench IdleRSS -benchtime 1x -count 5 ./appliance
func BenchmarkIdleRSS(b *testing.B) {
	settle := idleSettle
	if v, err := time.ParseDuration(os.Getenv("SKEIN_BENCH_IDLE")); err == nil {
		settle = v
	}
	var rss, anon, file float64
	for range b.N {
		m := idlePair(b, settle)
		rss, anon, file = rss+m["VmRSS:"], anon+m["RssAnon:"], file+m["RssFile:"]
	}
	n := float64(b.N)
	b.ReportMetric(rss/n, "gateway-idle-RSS-MiB")
	b.ReportMetric(anon/n, "anon-MiB")
	b.ReportMetric(file/n, "file-MiB")
}

// idlePair runs one pair of gateways until they are connected and idle and returns the
// larger of their memory figures (fields of /proc/PID/status, in MiB).
func idlePair(b *testing.B, settle time.Duration) map[string]float64 {
	a, c := twoClusters(b)
	defer stopGateways(a, c)
	deadline := time.Now().Add(15 * time.Second)
	for a.metric(b, `skein_gateway_connection_state{state="Connected"}`) != 1 ||
		c.metric(b, `skein_gateway_connection_state{state="Connected"}`) != 1 {
		if time.Now().After(deadline) {
			b.Fatal("gateways never connected")
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(settle)
	out := map[string]float64{}
	for name, g := range map[string]*cluster{"a": a, "b": c} {
		if _, err := g.get("/metrics"); err != nil {
			b.Fatal(err)
		}
		m := memStatus(b, g.proc.Process.Pid)
		b.Logf("gateway %s: VmRSS %.1f MiB (anonymous %.1f, file %.1f)", name, m["VmRSS:"], m["RssAnon:"], m["RssFile:"])
		for k, v := range m {
			out[k] = max(out[k], v)
		}
		if dir := os.Getenv("SKEIN_BENCH_MEMDIR"); dir != "" {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				b.Fatal(err)
			}
			keepMemory(b, g, filepath.Join(dir, name))
		}
	}
	return out
}

// stopGateways stops the gateways of a pair before the next one starts (their namespaces
// go at the end of the benchmark).
func stopGateways(cs ...*cluster) {
	for _, c := range cs {
		c.proc.Process.Kill()
	}
}

// memStatus reads the memory fields of /proc/PID/status in MiB.
func memStatus(tb testing.TB, pid int) map[string]float64 {
	s, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		tb.Fatal(err)
	}
	m := map[string]float64{}
	for _, l := range strings.Split(string(s), "\n") {
		if f := strings.Fields(l); len(f) == 3 && f[2] == "kB" {
			v, _ := strconv.ParseFloat(f[1], 64)
			m[f[0]] = v / 1024
		}
	}
	return m
}

// keepMemory writes what explains a gateway's memory to prefix.*: its smaps, status, metrics,
// goroutines and heap profile (taken last: it collects garbage first).
func keepMemory(tb testing.TB, g *cluster, prefix string) {
	keepPresent(tb, g.proc.Process.Pid, prefix)
	for _, f := range []string{"smaps", "status"} {
		if s, err := os.ReadFile(fmt.Sprintf("/proc/%d/%s", g.proc.Process.Pid, f)); err == nil {
			if err := os.WriteFile(prefix+"."+f, s, 0o644); err != nil {
				tb.Error(err)
			}
		}
	}
	for _, x := range []struct{ suffix, path string }{{".metrics", "/metrics"},
		{".goroutines", "/debug/pprof/goroutine?debug=1"}, {".heap.pprof", "/debug/pprof/heap?gc=1"}} {
		s, err := g.get(x.path)
		if err != nil {
			tb.Error(err)
			continue
		}
		if err := os.WriteFile(prefix+x.suffix, []byte(s), 0o644); err != nil {
			tb.Error(err)
		}
	}
}

// keepPresent writes the addresses of the executable's pages present in the process (from
// /proc/PID/pagemap) to prefix.present, one per line.
func keepPresent(tb testing.TB, pid int, prefix string) {
	maps, _ := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	pm, err := os.Open(fmt.Sprintf("/proc/%d/pagemap", pid))
	if err != nil {
		tb.Error(err)
		return
	}
	defer pm.Close()
	var out strings.Builder
	for _, l := range strings.Split(string(maps), "\n") {
		f := strings.Fields(l)
		if len(f) < 6 || !strings.HasSuffix(f[5], "skein-gateway") {
			continue
		}
		lo, hi, _ := strings.Cut(f[0], "-")
		start, _ := strconv.ParseUint(lo, 16, 64)
		end, _ := strconv.ParseUint(hi, 16, 64)
		buf := make([]byte, (end-start)/4096*8)
		pm.ReadAt(buf, int64(start/4096*8))
		for i := 0; i+8 <= len(buf); i += 8 {
			if buf[i+7]&0x80 != 0 {
				fmt.Fprintf(&out, "%x\n", start+uint64(i/8)*4096)
			}
		}
	}
	if err := os.WriteFile(prefix+".present", []byte(out.String()), 0o644); err != nil {
		tb.Error(err)
	}
}
