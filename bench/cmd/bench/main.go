// Command bench runs skein's benchmark ladder (bench/harness) on this machine and writes the
// report: a markdown table (also printed), a JSON file and an SVG chart. Run it as root.
//
//	bench [--quick] [--runs 5] [--duration 4s] [--rungs veth,wireguard-go,kernel-nat,skein,skein-nonat] [--out bench/results]
//	      [--contention 0.5] [--contention-rungs wireguard-go,kernel-nat,skein] [--no-breakdown] [--no-scale] [--no-connect]
//	      [--connect-only] [--no-lab] [--lab-only] [--lab-rounds 5] [--lab-seconds 6] [--compare OLD.json] [--profile DIR] [--hold]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/skein-net/skein/bench/harness"
)

func main() {
	fs := flag.NewFlagSet("bench", flag.ExitOnError)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `bench measures skein against the alternatives on this machine: each rung of the ladder is a
topology of network namespaces (built and removed by the harness), measured with iperf3
(TCP 1 and 10 streams both ways, UDP packets per second with loss) and skein-probe's
request/response latency, CPU seconds per GB and the gateways' peak RSS. Runs are interleaved
across rungs and each ratio to bare wireguard-go is paired run by run, with a 95% confidence
interval. The contended rungs (NAME+hog) are measured again beside a CPU hog pinned to core 0;
the CPU breakdown says where each rung's CPU per GB goes (perf); --compare says which figures
moved against an earlier report; the scale section runs the Go benchmarks of the gateway's
tables at the Kubernetes limits and of the agent and the controller with 1,000 peerings; the
connect section times skeinctl network connect --wait between two fresh installs in the lab
(target <= 10 s) with skeinctl's breakdown of it; the lab rung measures one TCP stream between
pods of two lab clusters peered by skein (the real node stack, the chart, skeinctl), beside local
cross-node pod-to-pod and bare wireguard-go in the same lab, in interleaved rounds, with the
ratios fabric/local (target >= 0.50, floor 0.30) and fabric/bare wireguard-go paired round by
round. Besides DATE.md, .json and .svg it writes
DATE.bench.txt, every run in Go benchmark format for benchstat (golang.org/x/perf/cmd/benchstat;
it wants --runs 6 or more for a confidence interval). Needs root and the Debian packages iperf3,
wireguard-tools and linux-perf (.ci/install-deps).

Flags:
`)
		fs.PrintDefaults()
	}
	quick := fs.Bool("quick", false, "smoke mode: one run of 1 s measurements (about a minute)")
	runs := fs.Int("runs", 0, "runs per rung, interleaved across rungs (default 5, 1 with --quick; with 3 or fewer a side no change is significant)")
	duration := fs.Duration("duration", 0, "length of each throughput measurement (default 4s, 1s with --quick)")
	rungs := fs.String("rungs", "", "comma-separated rungs to run (default all: veth, wireguard-go, kernel-nat, skein, skein-nonat, wireguard-go-ipv6, skein-ipv6)")
	out := fs.String("out", "", "directory for the report files: DATE.md, .json, .svg, .bench.txt and, with --compare, DATE-compare.md (default bench/results, where the committed reports are; bench/results/quick with --quick, so a smoke run never replaces them)")
	prefix := fs.String("prefix", "skb", "prefix of the namespaces the harness makes")
	profile := fs.String("profile", "", "directory for CPU profiles of the skein gateways during the first single-stream test (go tool pprof -top FILE)")
	hold := fs.Bool("hold", false, "build and check the rungs, then keep them up without measuring until interrupted (to inspect them by hand)")
	contention := fs.Float64("contention", -1, "share of one core (0-1) a CPU hog pinned to core 0 takes while the contended rungs are measured again as NAME+hog; 0 turns them off, and a negative value means 0.5, or 0 with --quick")
	contentionRungs := fs.String("contention-rungs", "wireguard-go,kernel-nat,skein", "comma-separated rungs measured again beside the hog")
	noScale := fs.Bool("no-scale", false, "skip the scale section: go test benchmarks of the gateway's tables at the Kubernetes limits, the agent and the controller with 1,000 peerings (about 2 minutes; the controller's needs the Kubernetes binaries of make k8s-binaries); --quick skips it too")
	noConnect := fs.Bool("no-connect", false, "skip the connect section: the lab with skein installed in both clusters, then skeinctl network connect --wait timed with its breakdown (bench/e2e's TestConnectTime, 1-3 minutes; needs the Kubernetes binaries, helm and the node stack of make k8s-binaries); --quick skips it too")
	noLab := fs.Bool("no-lab", false, "skip the lab rung: two lab clusters peered by skein, one TCP stream across them beside local pod-to-pod and bare wireguard-go in the same lab (bench/e2e's TestPathAccount without its perf run, 8-15 minutes; needs the Kubernetes binaries, helm and the node stack of make k8s-binaries); --quick skips it too")
	labOnly := fs.Bool("lab-only", false, "measure the lab rung alone (no ladder, no scale or connect section) and write its report into --out (default bench/results/lab, so it never replaces a whole report)")
	labRounds := fs.Int("lab-rounds", 5, "the lab rung's rounds (each measures every path once, interleaved)")
	labSeconds := fs.Int("lab-seconds", 6, "the lab rung's seconds per throughput measurement")
	connectOnly := fs.Bool("connect-only", false, "measure the connect section alone (no ladder, no scale section: --rungs, --no-scale and the ladder's flags do not apply; needs the Kubernetes binaries, helm and the node stack of make k8s-binaries) and write its report into --out (default bench/results/connect, so it never replaces a whole report)")
	noBreakdown := fs.Bool("no-breakdown", false, "skip the CPU breakdown (one more single-stream test per rung under perf record; needs perf, Debian package linux-perf)")
	compare := fs.String("compare", "", "an earlier report's JSON file: print which figures changed significantly (Mann-Whitney U, p < 0.05) and write DATE-compare.md")
	fromJSON := fs.String("from-json", "", "measure nothing: write the report files again from an earlier report's JSON (ratios recomputed from its runs), into --out")
	_ = fs.Parse(os.Args[1:])
	if *out == "" {
		*out = "bench/results"
		switch {
		case *quick:
			*out = filepath.Join("bench", "results", "quick")
		case *connectOnly:
			*out = filepath.Join("bench", "results", "connect")
		case *labOnly:
			*out = filepath.Join("bench", "results", "lab")
		}
	}
	var old *harness.Result
	if *compare != "" {
		old = readReport("--compare", *compare)
	}
	if *fromJSON != "" {
		res := readReport("--from-json", *fromJSON)
		res.Recompute()
		write(res, old, *out, nil)
		return
	}
	if os.Geteuid() != 0 {
		fail("bench needs root (network namespaces)")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *connectOnly && *labOnly {
		fail("--connect-only and --lab-only: pick one")
	}
	if *labOnly {
		start := time.Now()
		res := harness.NewResult(fmt.Sprintf("the lab rung alone (--lab-only), %d rounds of %d s", *labRounds, *labSeconds))
		fmt.Fprintln(os.Stderr, "bench: the lab rung (lab, helm install, skeinctl network connect, interleaved single-stream runs)")
		res.Lab = harness.RunLab(ctx, os.Stderr, *labRounds, *labSeconds)
		write(res, old, *out, &start)
		if len(res.Lab.Measurements) == 0 {
			os.Exit(1)
		}
		return
	}
	if *connectOnly {
		start := time.Now()
		res := harness.NewResult("the connect section alone (--connect-only)")
		fmt.Fprintln(os.Stderr, "bench: the connect section (lab, helm install, skeinctl network connect --wait)")
		res.Connect = harness.RunConnect(ctx, os.Stderr)
		write(res, old, *out, &start)
		if connectFailed(res.Connect) {
			os.Exit(1)
		}
		return
	}
	bin, err := os.MkdirTemp("", "skein-bench-bin-")
	if err != nil {
		fail(err.Error())
	}
	defer os.RemoveAll(bin)
	fmt.Fprintln(os.Stderr, "bench: building wireguard-go, skein-probe, skein-gateway")
	if err := harness.Prepare(ctx, bin); err != nil {
		fail(err.Error())
	}
	if *contention < 0 {
		*contention = 0.5
		if *quick {
			*contention = 0
		}
	}
	o := harness.Options{Quick: *quick, Runs: *runs, Duration: *duration, Prefix: *prefix, Log: os.Stderr, ProfileDir: *profile, Hold: *hold,
		Contention: *contention, ContentionRungs: strings.Split(*contentionRungs, ","), NoBreakdown: *noBreakdown}
	if *profile != "" {
		if err := os.MkdirAll(*profile, 0o755); err != nil {
			fail(err.Error())
		}
	}
	if *rungs != "" {
		o.Rungs = strings.Split(*rungs, ",")
	}
	start := time.Now()
	res, err := harness.Run(ctx, o, bin)
	if *hold && ctx.Err() != nil {
		fmt.Fprintln(os.Stderr, "bench: rungs removed")
		return
	}
	if err != nil {
		fail(err.Error())
	}
	if !*noScale && !*quick && ctx.Err() == nil {
		fmt.Fprintln(os.Stderr, "bench: the scale section (go test benchmarks)")
		if res.Scale, err = harness.RunScale(ctx, os.Stderr); err != nil {
			fmt.Fprintf(os.Stderr, "bench: the scale section stopped: %v\n", err)
		}
	}
	if !*noConnect && !*quick && ctx.Err() == nil {
		fmt.Fprintln(os.Stderr, "bench: the connect section (lab, helm install, skeinctl network connect --wait)")
		res.Connect = harness.RunConnect(ctx, os.Stderr)
	}
	if !*noLab && !*quick && ctx.Err() == nil {
		fmt.Fprintln(os.Stderr, "bench: the lab rung (lab, helm install, skeinctl network connect, interleaved single-stream runs)")
		res.Lab = harness.RunLab(ctx, os.Stderr, *labRounds, *labSeconds)
	}
	write(res, old, *out, &start)
	for _, r := range res.Rungs {
		if r.Error != "" {
			os.Exit(1)
		}
	}
}

// connectFailed says whether the connect section measured nothing (failed or was skipped).
func connectFailed(figs []harness.ScaleFigure) bool {
	for _, f := range figs {
		if f.Unit != "" && f.Error == "" && f.Skipped == "" {
			return false
		}
	}
	return true
}

// readReport reads a report's JSON for flag, or fails saying what is wrong with the file.
func readReport(flag, path string) *harness.Result {
	r, err := harness.ReadReport(path)
	if err != nil {
		fail(fmt.Sprintf("%s: %v", flag, err))
	}
	return r
}

// write prints the report and writes its files (DATE.md, .json, .svg, .bench.txt and, with
// old, DATE-compare.md) into dir.
func write(res, old *harness.Result, dir string, start *time.Time) {
	md := res.Markdown()
	fmt.Print(md)
	js, err := res.JSON()
	if err != nil {
		fail(err.Error())
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		fail(err.Error())
	}
	base := filepath.Join(dir, res.Date.Format("2006-01-02"))
	files := map[string][]byte{".md": []byte(md), ".json": js}
	if len(res.Rungs) > 0 { // the chart and the runs are the ladder's
		files[".svg"], files[".bench.txt"] = []byte(res.SVG()), []byte(res.GoBench())
	}
	if old != nil {
		cmp := res.CompareMarkdown(old)
		fmt.Print("\n" + cmp)
		files["-compare.md"] = []byte(cmp)
	}
	for ext, data := range files {
		if err := os.WriteFile(base+ext, data, 0o644); err != nil {
			fail(err.Error())
		}
	}
	took := ""
	if start != nil {
		took = fmt.Sprintf(" in %.0fs", time.Since(*start).Seconds())
	}
	exts, hint := "{md,json,svg,bench.txt}", " (benchstat OLD.bench.txt NEW.bench.txt compares two)"
	if len(res.Rungs) == 0 {
		exts, hint = "{md,json}", " (--compare OLD.json compares two)"
	}
	fmt.Fprintf(os.Stderr, "bench: done%s; wrote %s.%s%s%s\n",
		took, base, exts, map[bool]string{true: " and " + base + "-compare.md"}[old != nil], hint)
}

func fail(msg string) {
	fmt.Fprintf(os.Stderr, "bench: %s\n", msg)
	os.Exit(1)
}
