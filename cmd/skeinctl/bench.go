package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"html"
	"io"
	"math"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/skein-net/skein/control/probe"
)

type benchOpts struct {
	networkOpts
	output      string
	svg         string
	keep        bool
	image       string
	duration    time.Duration
	streams     []int
	cleanupWait time.Duration
}

func benchCmd(g *globals) *cobra.Command {
	o := &benchOpts{}
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure throughput, packet rate and latency between the two clusters, next to the same inside this one",
		Long: `Deploy skein-probe pods on every node of both clusters (a DaemonSet in a throw-away namespace
skein-probe-<id>), pick a pod on a node of this cluster that does not run the gateway and one
on such a node of the remote cluster, and measure between them, each for --duration:

  TCP           throughput with 1 and N streams (--streams), both directions
  UDP           packet rate at 64-byte packets and at the tunnel MTU, as fast as the sender
                can send, with the share lost on the way
  LATENCY       request/response round trips of 1 byte over one TCP connection, p50 and p99

The same measurements between two pods inside this cluster (on different nodes where there
are two) are the baseline; FABRIC/LOCAL is the ratio (for latency, how many times longer).
During each cross-cluster measurement the active gateways' CPU (cores) and resident memory
are read from their /metrics (process_cpu_seconds_total, process_resident_memory_bytes), so
the table shows what the fabric costs. The probes measure themselves (Go; no iperf3 needed).

Everything it created is removed when it ends, also on failure and on Ctrl-C (--keep leaves
it). The measurements load the clusters' networks: run it when that is acceptable.`,
		Example: `  skeinctl bench --remote-kubeconfig ~/.kube/cluster-b
  skeinctl bench --remote-kubeconfig ~/.kube/cluster-b --duration 30s --streams 1,4,16 -o json > bench.json
  skeinctl bench --remote-context cluster-b --svg bench.svg`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			switch o.output {
			case "", "table", "json":
			default:
				return fmt.Errorf("--output %q: want table or json", o.output)
			}
			if o.duration < time.Second || o.duration > 10*time.Minute {
				return fmt.Errorf("--duration %s: want 1s-10m", o.duration)
			}
			if len(o.streams) == 0 || len(o.streams) > 8 {
				return fmt.Errorf("--streams: want 1 to 8 stream counts, such as 1,8")
			}
			for _, n := range o.streams {
				if n < 1 || n > 128 {
					return fmt.Errorf("--streams %d: want 1-128", n)
				}
			}
			if o.svg != "" {
				// Checked before anything is measured; written only when something was.
				if st, err := os.Stat(o.svg); err == nil && !st.Mode().IsRegular() {
					return fmt.Errorf("--svg %s: not a regular file", o.svg)
				}
				if st, err := os.Stat(filepath.Dir(o.svg)); err != nil || !st.IsDir() {
					return fmt.Errorf("--svg %s: no directory %s to write it in", o.svg, filepath.Dir(o.svg))
				}
			}
			rep, err := g.bench(c.Context(), o)
			if rep != nil {
				if o.output == "json" {
					b, merr := json.MarshalIndent(rep, "", "  ")
					if merr != nil {
						return fmt.Errorf("-o json: %w", merr)
					}
					fmt.Fprintln(g.out, string(b))
				} else {
					rep.print(g.out)
				}
				if o.svg != "" {
					if werr := writeFileAtomic(o.svg, []byte(rep.SVG())); werr != nil {
						return fmt.Errorf("--svg: %w", werr)
					}
				}
			}
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.remoteKubeconfig, "remote-kubeconfig", "", "kubeconfig of the remote cluster (this or --remote-context is required)")
	f.StringVar(&o.remoteContext, "remote-context", "", "kubeconfig context of the remote cluster (in --remote-kubeconfig, else in the local kubeconfig)")
	f.StringVar(&o.remoteLiqoNamespace, "remote-liqo-namespace", "liqo", "namespace skein is installed in, in the remote cluster")
	f.StringVarP(&o.output, "output", "o", "table", "table or json")
	f.StringVar(&o.svg, "svg", "", "also write a chart of the figures to this file (SVG)")
	f.BoolVar(&o.keep, "keep", false, "leave the probe namespaces and pods in place")
	f.StringVar(&o.image, "probe-image", "", "the skein-probe image (default: skein-probe beside the skein-controller image, same registry and tag)")
	f.DurationVar(&o.duration, "duration", 10*time.Second, "length of each measurement (1s-10m); there are 2 x (2 x streams counts + 3) of them")
	f.IntSliceVar(&o.streams, "streams", []int{1, 8}, "TCP stream counts to measure, comma-separated (1-128 each)")
	f.DurationVar(&o.cleanupWait, "cleanup-wait", time.Minute, "how long to wait for the probe namespaces to be gone at the end (0: delete them and return)")
	return cmd
}

// gatewayCost is what the active gateways used during a measurement.
type gatewayCost struct {
	CPUCores float64 `json:"cpuCores"` // CPU seconds per second of the measurement
	RSSBytes float64 `json:"rssBytes"` // the larger of the samples before and after
	Error    string  `json:"error,omitempty"`
}

// benchFigure is one measurement: its raw result on the fabric and locally, the headline
// value of each (throughput in bit/s, packets/s, latency in microseconds) and their ratio.
type benchFigure struct {
	Name     string      `json:"name"`
	Unit     string      `json:"unit"` // bit/s, packet/s, us
	Fabric   float64     `json:"fabric"`
	Local    float64     `json:"local"`
	Ratio    float64     `json:"ratio"` // fabric / local
	Detail   string      `json:"detail,omitempty"`
	Raw      benchRaw    `json:"raw"`
	Gateways gatewayPair `json:"gateways"`
	Errors   []string    `json:"errors,omitempty"`
	kind     string      // tput, rate, latency
	args     []string    // skein-probe's flags
	value    func(any) float64
}

type benchRaw struct {
	Fabric any `json:"fabric"`
	Local  any `json:"local"`
}

type gatewayPair struct {
	Local  gatewayCost `json:"local"`
	Remote gatewayCost `json:"remote"`
}

// benchReport is skeinctl bench's result.
type benchReport struct {
	Local         clusterRef    `json:"local"`
	Remote        clusterRef    `json:"remote"`
	MTU           int           `json:"mtu"`
	Namespace     string        `json:"namespace"` // of the probe pods, in both clusters
	Duration      string        `json:"duration"`  // of each measurement
	Client        endpointRef   `json:"client"`
	Server        endpointRef   `json:"server"`
	ServerAddress string        `json:"serverAddress"` // the remote server as the client dials it
	LocalServer   endpointRef   `json:"localServer"`
	Figures       []benchFigure `json:"figures"`
	Notes         []string      `json:"notes,omitempty"`
	Started       time.Time     `json:"started"`
	TotalSeconds  float64       `json:"totalSeconds"`
}

// bench runs the whole benchmark.
func (g *globals) bench(ctx context.Context, o *benchOpts) (*benchReport, error) {
	start := time.Now()
	pr := newProgress(g.err)
	defer pr.done()
	quiet := *g
	quiet.out = g.err
	setup, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	l, r, err := quiet.sides(setup, &o.networkOpts)
	if err != nil {
		return nil, err
	}
	if !peeringConnected(setup, l) || !peeringConnected(setup, r) {
		return nil, fmt.Errorf("the peering is not Connected on both sides: nothing to measure (skeinctl test network, skeinctl diagnose)")
	}
	lv, err := peerView(setup, l)
	if err != nil || !lv.seen {
		return nil, fmt.Errorf("(local) no mapped Configuration of the remote cluster: %v", err)
	}
	rep := &benchReport{Local: clusterRef{ID: l.id}, Remote: clusterRef{ID: r.id}, MTU: tunnelMTU(setup, l),
		Duration: o.duration.String(), Started: start.UTC()}
	run := newRunID()
	runs := map[*side]*probeRun{}
	// Another run removes probe namespaces past their expiry: this one's outlives every
	// measurement it makes (2 x (2 x stream counts + 3) of --duration), with an hour to spare.
	keep := time.Hour + 2*time.Duration(2*(2*len(o.streams)+3))*o.duration
	for _, s := range []*side{l, r} {
		t := g.local()
		if s == r {
			t = target{kubeconfig: cmpOr(o.remoteKubeconfig, g.kubeconfig), context: o.remoteContext, liqoNamespace: o.remoteLiqoNamespace}
		}
		cfg, err := g.restConfig(t)
		if err != nil {
			return nil, err
		}
		removeExpired(setup, s.c)
		runs[s] = &probeRun{label: s.label, c: s.c, cfg: cfg, ns: probeNSPrefix + run, image: probeImage(setup, s.c, s.liqo, o.image), keepUntil: keep}
	}
	rep.Local.ProbeImage, rep.Remote.ProbeImage = runs[l].image, runs[r].image
	rep.Namespace = probeNSPrefix + run
	defer func() {
		if o.keep {
			pr.step("Keeping namespace %s in both clusters (--keep)", probeNSPrefix+run)
			return
		}
		pr.step("Removing namespace %s in both clusters", probeNSPrefix+run)
		clean, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
		defer cancel()
		var wg sync.WaitGroup
		for _, p := range runs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := p.remove(clean, o.cleanupWait); err != nil {
					pr.step("%v", err)
				}
			}()
		}
		wg.Wait()
	}()
	for _, s := range []*side{l, r} {
		if err := runs[s].deploy(setup, run); err != nil {
			return nil, err
		}
	}
	pr.step("Deployed skein-probe (%s) in both clusters, namespace %s", runs[l].image, probeNSPrefix+run)
	ready := map[*side][]probePod{}
	if err := waitFor(setup, func() (bool, error) {
		all := true
		for _, s := range []*side{l, r} {
			pods, want, err := runs[s].ready(setup)
			if err != nil {
				return false, nil
			}
			ready[s] = pods
			all = all && want > 0 && len(pods) == want
		}
		pr.status("probe pods ready: local %d, remote %d", len(ready[l]), len(ready[r]))
		return all, nil
	}); err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("interrupted: %w", context.Cause(ctx))
		}
		return nil, fmt.Errorf("probe pods not ready within %s: local %s; remote %s", g.timeout,
			strings.Join(runs[l].notReady(ctx), ", "), strings.Join(runs[r].notReady(ctx), ", "))
	}

	// The pods: a client and a server off the gateways' nodes where the clusters have such
	// nodes (the common case for application pods), and a local server on another node.
	gwL, gwR := activeGatewayNode(setup, l), activeGatewayNode(setup, r)
	pick := func(pods []probePod, avoid ...string) (probePod, bool) {
		for _, p := range pods {
			ok := true
			for _, a := range avoid {
				ok = ok && p.Node != a
			}
			if ok {
				return p, true
			}
		}
		return pods[0], false
	}
	client, ok := pick(ready[l], gwL)
	if !ok {
		rep.Notes = append(rep.Notes, "the local cluster has no node without its gateway: the client runs beside it")
	}
	server, ok := pick(ready[r], gwR)
	if !ok {
		rep.Notes = append(rep.Notes, "the remote cluster has no node without its gateway: the server runs beside it")
	}
	localServer, ok := pick(ready[l], client.Node)
	if !ok {
		rep.Notes = append(rep.Notes, "the local cluster has one node: the local baseline is between two pods on it")
		for _, p := range ready[l] {
			if p.Name != client.Name {
				localServer = p
			}
		}
		if localServer.Name == client.Name {
			return nil, fmt.Errorf("the local cluster has a single probe pod: no baseline to measure against")
		}
	}
	// Over IPv4 where the peering carries it, else over IPv6 (an IPv6-only peering).
	useV6 := server.IP == "" || !lv.hasFamily(false)
	family := map[bool]string{false: "IPv4", true: "IPv6"}[useV6]
	if server.addr(useV6) == "" || localServer.addr(useV6) == "" {
		return nil, fmt.Errorf("the probe pods %s and %s have no %s address (%s and %s) to measure between", server.Name, localServer.Name, family, cmpOr(server.IP, server.IP6), cmpOr(localServer.IP, localServer.IP6))
	}
	addr := lv.of(netip.MustParseAddr(server.addr(useV6)))
	if !addr.IsValid() {
		return nil, fmt.Errorf("the remote server's IP %s is outside the pod CIDRs the remote cluster published", server.addr(useV6))
	}
	ref := func(s *side, p probePod, gw string) endpointRef {
		return endpointRef{Cluster: s.label, Node: p.Node, Pod: p.Name, IP: p.addr(useV6), GatewayNode: p.Node == gw}
	}
	rep.Client, rep.Server, rep.LocalServer, rep.ServerAddress = ref(l, client, gwL), ref(r, server, gwR), ref(l, localServer, gwL), addr.String()
	metricsL, metricsR := gatewayMetricsURL(setup, l), gatewayMetricsURL(setup, r)
	// The remote gateway's /metrics is read from the remote server pod (same cluster).
	scrape := func(ctx context.Context, s *side, pod, url string) (cpu, rss float64, err error) {
		if url == "" {
			return 0, 0, fmt.Errorf("no active gateway pod found")
		}
		out, err := runs[s].exec(ctx, pod, "get", "--timeout", "5s", url)
		if err != nil {
			return 0, 0, err
		}
		return parseProcessMetrics(string(out))
	}

	d := o.duration
	secs := fmt.Sprint(d)
	var figs []benchFigure
	tput := func(v any) float64 { return v.(*probe.Throughput).BitsPerSecond }
	for _, n := range o.streams {
		for _, rev := range []bool{false, true} {
			name := fmt.Sprintf("TCP %d stream", n)
			if n > 1 {
				name += "s"
			}
			args := []string{"--duration", secs, "--streams", fmt.Sprint(n)}
			if rev {
				name += ", reverse"
				args = append(args, "--reverse")
			}
			figs = append(figs, benchFigure{Name: name, Unit: "bit/s", kind: "tput", args: args, value: tput})
		}
	}
	for _, size := range []int{64, rep.MTU} {
		figs = append(figs, benchFigure{Name: fmt.Sprintf("UDP %d-byte packets", size), Unit: "packet/s", kind: "rate",
			args: []string{"--duration", secs, "--size", fmt.Sprint(size)}, value: func(v any) float64 { return v.(*probe.Rate).PacketsPerSec }})
	}
	figs = append(figs,
		benchFigure{Name: "latency p50", Unit: "us", kind: "latency", args: []string{"--duration", secs}, value: func(v any) float64 { return float64(v.(*probe.Latency).P50Micro) }},
		benchFigure{Name: "latency p99", Unit: "us", kind: "latency", args: []string{"--duration", secs}, value: func(v any) float64 { return float64(v.(*probe.Latency).P99Micro) }})

	total := 0
	for i, f := range figs {
		if i > 0 && f.kind == "latency" && figs[i-1].kind == "latency" {
			continue // p50 and p99 come from one measurement
		}
		total += 2
	}
	step := 0
	measure := func(f *benchFigure, where string, target string) (any, error) {
		step++
		pr.status("%s %d/%d: %s (%s, %s)", bar(step-1, total), step, total, f.Name, where, d)
		var res any
		switch f.kind {
		case "tput":
			res = &probe.Throughput{}
		case "rate":
			res = &probe.Rate{}
		default:
			res = &probe.Latency{}
		}
		mctx, cancel := context.WithTimeout(ctx, d+2*time.Minute)
		defer cancel()
		out, err := runs[l].exec(mctx, client.Name, append(append([]string{f.kind}, f.args...), target)...)
		if err != nil {
			return nil, err
		}
		if err := json.Unmarshal(out, res); err != nil {
			return nil, fmt.Errorf("skein-probe %s printed no result: %q", f.kind, printable(string(out)))
		}
		return res, nil
	}
	pr.step("Measuring from %s (%s) to %s (%s, as %s) and, as the baseline, to %s (%s): %d measurements of %s",
		client.Name, client.Node, server.Name, server.Node, addr, localServer.Name, localServer.Node, total, d)
	for i := range figs {
		f := &figs[i]
		if i > 0 && f.kind == "latency" && figs[i-1].kind == "latency" {
			prev := figs[i-1]
			f.Raw, f.Gateways, f.Errors = prev.Raw, prev.Gateways, prev.Errors
		} else {
			// Cross-cluster, with the gateways' counters read before and after.
			type sample struct{ cpu, rss float64 }
			var before, after [2]sample
			var errs [2]error
			read := func(into *[2]sample) {
				var wg sync.WaitGroup
				for k, x := range []struct {
					s        *side
					pod, url string
				}{{l, client.Name, metricsL}, {r, server.Name, metricsR}} {
					wg.Add(1)
					go func() {
						defer wg.Done()
						// A probe that stops answering must not hold the run for ever.
						sctx, cancel := context.WithTimeout(ctx, scrapeTimeout)
						cpu, rss, err := scrape(sctx, x.s, x.pod, x.url)
						cancel()
						into[k] = sample{cpu, rss}
						if err != nil {
							errs[k] = err
						}
					}()
				}
				wg.Wait()
			}
			read(&before)
			t0 := time.Now()
			fab, err := measure(f, "fabric", addr.String())
			elapsed := time.Since(t0).Seconds()
			read(&after)
			if err != nil {
				f.Errors = append(f.Errors, "fabric: "+err.Error())
			}
			f.Raw.Fabric = fab
			costs := []*gatewayCost{&f.Gateways.Local, &f.Gateways.Remote}
			for k := range 2 {
				if errs[k] != nil {
					costs[k].Error = errs[k].Error()
					continue
				}
				costs[k].CPUCores = (after[k].cpu - before[k].cpu) / elapsed
				costs[k].RSSBytes = max(after[k].rss, before[k].rss)
			}
			loc, err := measure(f, "local", localServer.addr(useV6))
			if err != nil {
				f.Errors = append(f.Errors, "local: "+err.Error())
			}
			f.Raw.Local = loc
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("interrupted: %w", context.Cause(ctx))
		}
		if f.Raw.Fabric != nil {
			f.Fabric = f.value(f.Raw.Fabric)
		}
		if f.Raw.Local != nil {
			f.Local = f.value(f.Raw.Local)
		}
		if f.Local > 0 {
			f.Ratio = f.Fabric / f.Local
		}
		if rr, ok := f.Raw.Fabric.(*probe.Rate); ok {
			f.Detail = fmt.Sprintf("fabric %.1f%% lost", rr.LossPercent)
			if lr, ok := f.Raw.Local.(*probe.Rate); ok {
				f.Detail += fmt.Sprintf(", local %.1f%% lost", lr.LossPercent)
			}
		}
	}
	rep.Figures = figs
	rep.TotalSeconds = time.Since(start).Seconds()
	for _, f := range figs {
		if len(f.Errors) > 0 {
			return rep, fmt.Errorf("%s: %s", f.Name, strings.Join(f.Errors, "; "))
		}
	}
	return rep, nil
}

// bar draws a progress bar of done out of total steps.
func bar(done, total int) string {
	const width = 20
	n := width * done / max(total, 1)
	return "[" + strings.Repeat("#", n) + strings.Repeat("-", width-n) + "]"
}

// gatewayMetricsURL is the /metrics address of s's active gateway of the peering.
func gatewayMetricsURL(ctx context.Context, s *side) string {
	var pods corev1.PodList
	if err := s.c.List(ctx, &pods, client.MatchingLabels{"networking.liqo.io/component": "gateway", "networking.liqo.io/active": "true"}); err != nil {
		return ""
	}
	gws := peeringGateways(ctx, s)
	for _, p := range pods.Items {
		if !gws[p.Namespace+"/"+p.Labels["networking.liqo.io/gateway"]] || p.Status.PodIP == "" {
			continue
		}
		return fmt.Sprintf("http://%s/metrics", netip.AddrPortFrom(netip.MustParseAddr(p.Status.PodIP), uint16(gatewayMetricsPort(&p))))
	}
	return ""
}

// parseProcessMetrics reads process_cpu_seconds_total and process_resident_memory_bytes from
// Prometheus text.
func parseProcessMetrics(text string) (cpu, rss float64, err error) {
	var haveCPU, haveRSS bool
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		name, value, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		v, perr := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if perr == nil && (math.IsNaN(v) || math.IsInf(v, 0) || v < 0) {
			perr = fmt.Errorf("%s is %v: want a finite, non-negative number", name, v)
		}
		switch name {
		case "process_cpu_seconds_total":
			cpu, haveCPU = v, perr == nil
		case "process_resident_memory_bytes":
			rss, haveRSS = v, perr == nil
		}
	}
	if !haveCPU || !haveRSS {
		return 0, 0, fmt.Errorf("no process_cpu_seconds_total and process_resident_memory_bytes in the gateway's /metrics")
	}
	return cpu, rss, nil
}

// human writes a figure in its unit.
func human(v float64, unit string) string {
	switch unit {
	case "bit/s":
		switch {
		case v >= 1e9:
			return fmt.Sprintf("%.2f Gbit/s", v/1e9)
		case v >= 1e6:
			return fmt.Sprintf("%.0f Mbit/s", v/1e6)
		}
		return fmt.Sprintf("%.0f kbit/s", v/1e3)
	case "packet/s":
		if v >= 1e6 {
			return fmt.Sprintf("%.2f Mpps", v/1e6)
		}
		return fmt.Sprintf("%.1f kpps", v/1e3)
	case "us":
		if v >= 10000 {
			return fmt.Sprintf("%.1f ms", v/1000)
		}
		return fmt.Sprintf("%.0f us", v)
	}
	return fmt.Sprint(v)
}

func (rep *benchReport) print(w io.Writer) {
	fmt.Fprintf(w, "From %s/%s to %s/%s (as %s); baseline to %s/%s; %s each; tunnel MTU %d\n\n",
		rep.Client.Cluster, rep.Client.Node, rep.Server.Cluster, rep.Server.Node, rep.ServerAddress,
		rep.LocalServer.Cluster, rep.LocalServer.Node, rep.Duration, rep.MTU)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "MEASUREMENT\tFABRIC\tLOCAL\tFABRIC/LOCAL\tGATEWAY CPU (LOCAL, REMOTE)\tGATEWAY RSS (LOCAL, REMOTE)\t")
	for _, f := range rep.Figures {
		fab, loc, ratio := "-", "-", "-"
		if f.Raw.Fabric != nil {
			fab = human(f.Fabric, f.Unit)
		}
		if f.Raw.Local != nil {
			loc = human(f.Local, f.Unit)
		}
		if f.Ratio > 0 {
			ratio = fmt.Sprintf("%.2f", f.Ratio)
		}
		if f.Detail != "" {
			fab += " (" + strings.TrimPrefix(strings.SplitN(f.Detail, ",", 2)[0], "fabric ") + ")"
			if parts := strings.SplitN(f.Detail, ", ", 2); len(parts) == 2 {
				loc += " (" + strings.TrimPrefix(parts[1], "local ") + ")"
			}
		}
		cost := func(c gatewayCost) (string, string) {
			if c.Error != "" {
				return "?", "?"
			}
			return fmt.Sprintf("%.2f", c.CPUCores), fmt.Sprintf("%.0f MiB", c.RSSBytes/(1<<20))
		}
		lc, lm := cost(f.Gateways.Local)
		rc, rm := cost(f.Gateways.Remote)
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s, %s cores\t%s, %s\t\n", f.Name, fab, loc, ratio, lc, rc, lm, rm)
	}
	tw.Flush()
	for _, n := range rep.Notes {
		fmt.Fprintf(w, "Note: %s\n", n)
	}
	for _, f := range rep.Figures {
		for _, e := range f.Errors {
			fmt.Fprintf(w, "ERROR %s: %s\n", f.Name, printable(e))
		}
		if f.Gateways.Local.Error != "" || f.Gateways.Remote.Error != "" {
			fmt.Fprintf(w, "Note: %s: gateway metrics not read: %s %s\n", f.Name, printable(f.Gateways.Local.Error), printable(f.Gateways.Remote.Error))
			break
		}
	}
	fmt.Fprintln(w, "(latency: FABRIC/LOCAL is how many times longer; other rows: the share of the local figure)")
}

// SVG draws the figures as bar pairs, fabric beside local, in the style of make bench's
// charts: throughput on the left, latency on the right.
func (rep *benchReport) SVG() string {
	const w, h, pad, chartW = 860, 360, 50, 370
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", w, h, w, h)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", w, h)
	fmt.Fprintf(&b, `<text x="%d" y="20" font-size="14" font-weight="bold">skeinctl bench, %s: fabric (blue) and inside the local cluster (grey)</text>`+"\n",
		pad, rep.Started.Format("2006-01-02 15:04 UTC"))
	colors := [2]string{"#4e79a7", "#8c8c8c"}
	for ci, chart := range []struct{ unit, title string }{
		{"bit/s", "TCP throughput (Mbit/s, higher is better)"},
		{"us", "Request/response latency (us, lower is better)"},
	} {
		x0 := pad + ci*(chartW+pad)
		top, bottom := 60, h-70
		var figs []benchFigure
		maxV := 0.0
		for _, f := range rep.Figures {
			if f.Unit == chart.unit {
				figs = append(figs, f)
				maxV = max(maxV, f.Fabric, f.Local)
			}
		}
		if maxV == 0 {
			maxV = 1
		}
		fmt.Fprintf(&b, `<text x="%d" y="45">%s</text>`+"\n", x0, chart.title)
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>`+"\n", x0, bottom, x0+chartW, bottom)
		n := max(len(figs), 1)
		gw := chartW / n
		for i, f := range figs {
			scale := func(v float64) int { return bottom - int(v/maxV*float64(bottom-top)) }
			bw := gw / 3
			for k, v := range []float64{f.Fabric, f.Local} {
				x := x0 + i*gw + gw/6 + k*bw
				shown := v
				if chart.unit == "bit/s" {
					shown = v / 1e6
				}
				fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%d" height="%d" fill="%s"/>`+"\n", x, scale(v), bw-2, bottom-scale(v), colors[k])
				fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle" font-size="10">%.0f</text>`+"\n", x+bw/2, scale(v)-4, shown)
			}
			label := strings.TrimPrefix(strings.TrimPrefix(f.Name, "TCP "), "latency ")
			fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle" font-size="10">%s</text>`+"\n", x0+i*gw+gw/2, bottom+16, html.EscapeString(label))
			if f.Ratio > 0 {
				fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle" font-size="10">x%.2f</text>`+"\n", x0+i*gw+gw/2, bottom+30, f.Ratio)
			}
		}
	}
	b.WriteString("</svg>\n")
	return b.String()
}

// scrapeTimeout bounds one read of a gateway's /metrics through a probe pod.
const scrapeTimeout = 30 * time.Second

// writeFileAtomic writes b to path through a temporary file in the same directory renamed over
// it, so that path is either what it was or the whole new content.
func writeFileAtomic(path string, b []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		os.Remove(f.Name())
		return err
	}
	if err := f.Chmod(0o644); err != nil {
		f.Close()
		os.Remove(f.Name())
		return err
	}
	if err := f.Close(); err != nil {
		os.Remove(f.Name())
		return err
	}
	if err := os.Rename(f.Name(), path); err != nil {
		os.Remove(f.Name())
		return err
	}
	return nil
}
