// Package harness is skein's benchmark ladder: topologies of network namespaces from a bare
// veth pair up to skein's gateways, each measured with the same tools (iperf3 from Debian, as
// subctl benchmark does, and skein-probe's request/response client), several runs interleaved
// across rungs (A B A B) so that drift hits all alike, reported as a markdown table, JSON and
// an SVG chart. Every rung is built in namespaces of its own and removed afterwards, also on
// error; nothing is added to the machine's own namespace.
package harness

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Options configure a run.
type Options struct {
	// Quick is the smoke mode: one run of one-second measurements.
	Quick bool
	// Runs per rung (default 5; 1 when Quick).
	Runs int
	// Duration of each throughput measurement (default 4 s; 1 s when Quick).
	Duration time.Duration
	// Rungs to run by name (default all: veth, wireguard-go, kernel-nat, skein, skein-nonat).
	Rungs []string
	// Prefix of the namespaces (default "skb").
	Prefix string
	// Log receives progress lines.
	Log io.Writer
	// ProfileDir, if set, receives a CPU profile of every skein gateway taken during the first
	// run's single-stream TCP test (RUNG-gatewayN.pprof; read with go tool pprof).
	ProfileDir string
	// Hold builds the rungs, checks them and then, instead of measuring, keeps them up until
	// ctx is done, for poking at by hand (ip netns exec ...); they are removed after.
	Hold bool
	// Contention is the share of one core (0 to 1) a CPU hog pinned to CPU 0 takes while the
	// contended rungs are measured again (see hog.go); 0 measures no contended rung.
	Contention float64
	// ContentionRungs are the rungs measured again under contention (default wireguard-go,
	// kernel-nat, skein), each reported as NAME+hog with the figures of contendedMetrics.
	ContentionRungs []string
	// NoBreakdown skips the CPU breakdown (one extra single-stream test per rung under perf).
	NoBreakdown bool
}

// contendedSuffix names a rung measured beside the CPU hog.
const contendedSuffix = "+hog"

// contendedMetrics are the figures taken under contention: the single-stream and 10-stream
// throughput, latency and CPU per GB (the UDP floods and the 32-stream memory test are left
// out to keep the ladder's length reasonable).
var contendedMetrics = []string{"tcp1", "tcp1-reverse", "tcp10", "rr-p50", "rr-p99", "cpu-per-gb"}

// Metric is one figure over the runs.
type Metric struct {
	Median float64   `json:"median"`
	Min    float64   `json:"min"`
	Max    float64   `json:"max"`
	Runs   []float64 `json:"runs"`
}

func summarize(v []float64) Metric {
	if len(v) == 0 {
		return Metric{}
	}
	s := slices.Clone(v)
	slices.Sort(s)
	m := s[len(s)/2]
	if len(s)%2 == 0 {
		m = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return Metric{Median: m, Min: s[0], Max: s[len(s)-1], Runs: v}
}

// RungResult is what a rung measured.
type RungResult struct {
	Name        string            `json:"name"`
	Description string            `json:"description"`
	Metrics     map[string]Metric `json:"metrics"`
	// Ratios are the metrics over the baseline's (bare wireguard-go, or bare wireguard-go
	// beside the hog for a contended rung), paired run by run, with confidence intervals.
	Ratios map[string]Ratio `json:"ratios,omitempty"`
	// Breakdown is where the CPU per GB goes (cpuprofile.go); BreakdownError says why there
	// is none.
	Breakdown      *Breakdown `json:"breakdown,omitempty"`
	BreakdownError string     `json:"breakdownError,omitempty"`
	Error          string     `json:"error,omitempty"`
}

// Result is a whole run of the ladder.
type Result struct {
	Date      time.Time    `json:"date"`
	Machine   Machine      `json:"machine"`
	Settings  string       `json:"settings"`
	Placement string       `json:"placement"`
	Rungs     []RungResult `json:"rungs"`
	// Scale holds the scale and control-plane benchmarks' figures (RunScale), if they ran.
	Scale []ScaleFigure `json:"scale,omitempty"`
	// Connect holds the connect section's figures (RunConnect), if it ran: skeinctl network
	// connect --wait on two fresh installs in the lab, and where its time went.
	Connect []ScaleFigure `json:"connect,omitempty"`
	// Lab is the lab rung (RunLab), if it ran: the fabric inside two lab clusters beside
	// local pod-to-pod and bare wireguard-go in the same lab.
	Lab *LabSection `json:"lab,omitempty"`
}

// Machine is what the figures were measured on.
type Machine struct {
	CPU    string `json:"cpu"`
	Cores  int    `json:"cores"`
	Kernel string `json:"kernel"`
	Go     string `json:"go"`
}

func machine() Machine {
	m := Machine{Cores: runtime.NumCPU(), Go: runtime.Version()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	return m
}

// The metrics, in report order, with their units.
var metricOrder = []struct{ key, title, unit string }{
	{"tcp1", "TCP 1 stream", "Mbit/s"},
	{"tcp1-reverse", "TCP 1 stream reverse", "Mbit/s"},
	{"tcp10", "TCP 10 streams", "Mbit/s"},
	{"tcp10-reverse", "TCP 10 streams reverse", "Mbit/s"},
	{"udp64-pps", "UDP 64 B", "kpps"},
	{"udp64-loss", "UDP 64 B loss", "%"},
	{"udpmtu-pps", fmt.Sprintf("UDP %d B", InnerMTU), "kpps"},
	{"udpmtu-loss", fmt.Sprintf("UDP %d B loss", InnerMTU), "%"},
	{"rr-p50", "RR p50", "us"},
	{"rr-p99", "RR p99", "us"},
	{"cpu-per-gb", "CPU per GB", "s"},
	{"gateway-rss-idle", "gateway RSS idle, connected", "MiB"},
	{"gateway-anon-idle", "gateway private (anonymous) RSS idle: what each more gateway on a node costs", "MiB"},
	{"gateway-rss", "gateway peak RSS, up to 10 streams", "MiB"},
	{"gateway-rss-32", "gateway peak RSS, 32 streams", "MiB"},
}

// AllRungs are the rungs the harness knows, in ladder order.
func AllRungs() []Rung {
	return []Rung{&vethRung{}, &wireguardRung{}, &kernelNATRung{}, &skeinRung{nat: true}, &skeinRung{},
		&wireguardRung{v6: true}, &skeinRung{nat: true, v6: true}}
}

// Prepare builds the binaries the rungs run (wireguard-go at the version go.mod pins,
// skein-probe, skein-gateway) into dir, statically linked.
func Prepare(ctx context.Context, dir string) error {
	if _, err := exec.LookPath("iperf3"); err != nil {
		return fmt.Errorf("iperf3 (Debian package iperf3) is needed: %w", err)
	}
	if _, err := exec.LookPath("wg"); err != nil {
		return fmt.Errorf("wg (Debian package wireguard-tools) is needed: %w", err)
	}
	if err := os.Chmod(dir, 0o755); err != nil { // skein-gateway runs as nobody
		return err
	}
	root, err := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Dir}}").Output()
	if err != nil {
		return fmt.Errorf("find the module root: %w", err)
	}
	cmd := exec.CommandContext(ctx, "go", "build", "-o", dir+"/", "golang.zx2c4.com/wireguard", "./cmd/skein-probe", "./cmd/skein-gateway")
	cmd.Dir = strings.TrimSpace(string(root))
	// Static, as the images ship them (make images): a cgo build maps libc and the loader too,
	// about 1.5 MiB more of every gateway's RSS.
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build: %w: %s", err, out)
	}
	return os.Rename(filepath.Join(dir, "wireguard"), filepath.Join(dir, "wireguard-go"))
}

// Run builds the selected rungs, measures them Runs times interleaved, and removes them.
func Run(ctx context.Context, o Options, binDir string) (*Result, error) {
	if o.Prefix == "" {
		o.Prefix = "skb"
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	if o.Runs == 0 {
		o.Runs = 5
		if o.Quick {
			o.Runs = 1
		}
	}
	if o.Duration == 0 {
		o.Duration = 4 * time.Second
		if o.Quick {
			o.Duration = time.Second
		}
	}
	if o.Contention < 0 || o.Contention > 1 {
		return nil, fmt.Errorf("harness: contention %v is not a share of one core between 0 and 1", o.Contention)
	}
	if len(o.ContentionRungs) == 0 {
		o.ContentionRungs = []string{"wireguard-go", "kernel-nat", "skein"}
	}
	if o.Runs > 20 || o.Duration > time.Minute {
		return nil, errors.New("harness: at most 20 runs of at most one minute each")
	}
	var rungs []Rung
	for _, r := range AllRungs() {
		if len(o.Rungs) == 0 || slices.Contains(o.Rungs, r.Name()) {
			rungs = append(rungs, r)
		}
	}
	if len(rungs) == 0 {
		return nil, fmt.Errorf("harness: no rung named %v (known: veth, wireguard-go, kernel-nat, skein, skein-nonat, wireguard-go-ipv6, skein-ipv6)", o.Rungs)
	}
	work, err := os.MkdirTemp("", "skein-bench-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(work)
	if err := os.Chmod(work, 0o755); err != nil { // gateways run as nobody and read their configs here
		return nil, err
	}
	logf, err := os.Create(filepath.Join(work, "processes.log"))
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	env := &Env{Prefix: o.Prefix, Bin: binDir, Work: work, Log: logf, Profile: o.ProfileDir != ""}
	res := &Result{Date: time.Now().UTC(), Machine: machine(),
		Settings:  fmt.Sprintf("%d runs per rung, interleaved; %s per throughput measurement; inner MTU %d", o.Runs, o.Duration, InnerMTU),
		Placement: fmt.Sprintf("no CPU pinning: every process may run on any of the %d cores; iperf3 client and server in the rung's end namespaces", runtime.NumCPU())}
	paths := make([]*Path, len(rungs))
	defer func() {
		for _, r := range rungs {
			_ = r.Down()
		}
	}()
	// What is measured: every rung, then the contended ones again; results in that order.
	type variant struct {
		rung      int
		contended bool
		samples   map[string][]float64
		dead      bool // a measurement failed twice: no more runs
	}
	var variants []*variant
	results := make([]RungResult, 0, len(rungs))
	for i, r := range rungs {
		variants = append(variants, &variant{rung: i, samples: map[string][]float64{}})
		results = append(results, RungResult{Name: r.Name(), Description: r.Describe()})
	}
	if o.Contention > 0 {
		for i, r := range rungs {
			if slices.Contains(o.ContentionRungs, r.Name()) {
				variants = append(variants, &variant{rung: i, contended: true, samples: map[string][]float64{}})
				results = append(results, RungResult{Name: r.Name() + contendedSuffix,
					Description: fmt.Sprintf("%s, beside a CPU hog taking %.0f%% of core 0", r.Name(), 100*o.Contention)})
			}
		}
	}
	for i, r := range rungs {
		fmt.Fprintf(o.Log, "bench: building %s\n", r.Name())
		p, err := r.Up(env)
		if err == nil {
			err = checkPath(ctx, env, p)
		}
		if err != nil {
			for vi, v := range variants {
				if v.rung == i {
					results[vi].Error = err.Error()
				}
			}
			fmt.Fprintf(o.Log, "bench: %s: %v\n", r.Name(), err)
			continue
		}
		paths[i] = p
	}
	if o.Hold {
		for i, p := range paths {
			if p != nil {
				fmt.Fprintf(o.Log, "bench: %s is up: ip netns exec %s iperf3 -s; ip netns exec %s iperf3 -c %s (namespaces: ip netns list | grep %s)\n",
					rungs[i].Name(), p.Server, p.Client, p.Addr, o.Prefix)
			}
		}
		fmt.Fprintln(o.Log, "bench: holding the rungs until interrupted (Ctrl-C removes them)")
		<-ctx.Done()
		return nil, ctx.Err()
	}
	order := make([]int, 0, len(variants)) // a rung's contended measurement right after its own
	for i := range rungs {
		for vi, v := range variants {
			if v.rung == i {
				order = append(order, vi)
			}
		}
	}
	for run := range o.Runs {
		for _, vi := range order {
			v, name := variants[vi], results[variants[vi].rung].Name
			p := paths[v.rung]
			if p == nil || v.dead {
				continue
			}
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			fmt.Fprintf(o.Log, "bench: run %d/%d: %s\n", run+1, o.Runs, results[vi].Name)
			mo := measureOptions{first: run == 0 && !v.contended, contended: v.contended}
			if run == 0 && o.ProfileDir != "" && !v.contended {
				mo.profile = filepath.Join(o.ProfileDir, name)
			}
			var stopHog func()
			if v.contended {
				stopHog = startHog(o.Contention)
			}
			m, err := measure(ctx, env, p, o, mo)
			if err != nil && ctx.Err() == nil {
				// One retry: a single failed tool run (such as iperf3's control connection
				// reset under a UDP flood) should not drop the rung; a second one does.
				fmt.Fprintf(o.Log, "bench: %s: %v; measuring again\n", results[vi].Name, err)
				mo.profile = ""
				m, err = measure(ctx, env, p, o, mo)
			}
			if stopHog != nil {
				stopHog()
			}
			if err != nil {
				results[vi].Error = err.Error()
				fmt.Fprintf(o.Log, "bench: %s: %v\n", results[vi].Name, err)
				v.dead = true
				continue
			}
			for k, x := range m {
				v.samples[k] = append(v.samples[k], x)
			}
			if run == 0 && !v.contended && !o.NoBreakdown && p.wants("cpu-breakdown") {
				fmt.Fprintf(o.Log, "bench: CPU breakdown of %s (one more single-stream test, under perf)\n", name)
				if b, err := profileBreakdown(ctx, env, p, o); err != nil {
					results[vi].BreakdownError = err.Error()
					fmt.Fprintf(o.Log, "bench: CPU breakdown of %s: %v\n", name, err)
				} else {
					results[vi].Breakdown = b
				}
			}
		}
	}
	for vi, v := range variants {
		results[vi].Metrics = map[string]Metric{}
		for k, x := range v.samples {
			results[vi].Metrics[k] = summarize(x)
		}
	}
	for vi, v := range variants {
		// The baseline beside the hog is set against itself without it (what the hog costs
		// bare wireguard-go), an IPv6 rung against bare wireguard-go over IPv6.
		base := baselineOf(results[vi].Name)
		bi := slices.IndexFunc(results, func(r RungResult) bool { return r.Name == base })
		if bi < 0 || bi == vi {
			continue
		}
		results[vi].Ratios = map[string]Ratio{}
		for k, x := range v.samples {
			if r, ok := pairedRatio(x, variants[bi].samples[k]); ok {
				results[vi].Ratios[k] = r
			}
		}
	}
	res.Rungs = results
	if o.Contention > 0 {
		res.Placement += fmt.Sprintf("; the %s rungs ran beside a CPU hog pinned to core 0 taking %.0f%% of it", contendedSuffix, 100*o.Contention)
	}
	return res, nil
}

// checkPath proves the rung carries traffic before it is measured: a few request/response
// round trips end to end.
func checkPath(ctx context.Context, e *Env, p *Path) error {
	srv, err := p.Server.start(e.Log, filepath.Join(e.Bin, "skein-probe"), "rr-serve", "--tcp", ":7073")
	if err != nil {
		return err
	}
	defer func() { _ = srv.Process.Kill(); _ = srv.Wait() }()
	var last error
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if _, last = p.Client.output(filepath.Join(e.Bin, "skein-probe"), "rr", "--count", "10", "--timeout", "2s", net.JoinHostPort(p.Addr, "7073")); last == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	return fmt.Errorf("no traffic through the rung in 15 s: %w", last)
}

// cpuSeconds is a process's user+system CPU time so far (children excluded).
func cpuSeconds(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// Fields after the command name, which is in parentheses and may hold spaces.
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (u + st) / 100 // USER_HZ is 100 on Linux
}

func peakRSSMiB(pid int) float64 { return statusMiB(pid, "VmHWM:") }

// statusMiB reads a memory field (VmHWM:, VmRSS:) of /proc/PID/status in MiB.
func statusMiB(pid int, field string) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, field); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			return kb / 1024
		}
	}
	return 0
}

type iperfResult struct {
	End struct {
		SumSent struct {
			Bytes         float64 `json:"bytes"`
			BitsPerSecond float64 `json:"bits_per_second"`
		} `json:"sum_sent"`
		SumReceived struct {
			Bytes         float64 `json:"bytes"`
			BitsPerSecond float64 `json:"bits_per_second"`
			Seconds       float64 `json:"seconds"`
		} `json:"sum_received"`
		Sum struct {
			Packets     float64 `json:"packets"`
			LostPackets float64 `json:"lost_packets"`
			LostPercent float64 `json:"lost_percent"`
			Seconds     float64 `json:"seconds"`
		} `json:"sum"`
	} `json:"end"`
	Error string `json:"error"`
}

// iperf runs the iperf3 client in the client namespace and returns its result and its CPU
// seconds (from its rusage).
func iperf(ctx context.Context, p *Path, args ...string) (*iperfResult, float64, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", string(p.Client), "iperf3", "-c", p.Addr, "-J"}, args...)...)
	out, err := cmd.Output()
	var r iperfResult
	if jerr := json.Unmarshal(out, &r); jerr != nil {
		return nil, 0, fmt.Errorf("iperf3 %s: %v (output %q)", strings.Join(args, " "), errors.Join(err, jerr), out)
	}
	if r.Error != "" || err != nil {
		return nil, 0, fmt.Errorf("iperf3 %s: %v %s", strings.Join(args, " "), err, r.Error)
	}
	var cpu float64
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		cpu = time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
	}
	return &r, cpu, nil
}

// measureOptions say what one measurement of a rung takes.
type measureOptions struct {
	// first is the rung's first measurement: the gateways' idle RSS is taken then.
	first bool
	// contended: only contendedMetrics.
	contended bool
	// profile, if set, is the file prefix of the gateways' CPU profiles.
	profile string
}

// measure takes every figure of one run of a rung.
func measure(ctx context.Context, e *Env, p *Path, o Options, mo measureOptions) (map[string]float64, error) {
	first, profile := mo.first, mo.profile
	srv, err := p.Server.start(e.Log, "iperf3", "-s", "-p", "5201")
	if err != nil {
		return nil, err
	}
	defer func() { _ = srv.Process.Kill(); _ = srv.Wait() }()
	rrSrv, err := p.Server.start(e.Log, filepath.Join(e.Bin, "skein-probe"), "rr-serve", "--tcp", ":7073")
	if err != nil {
		return nil, err
	}
	defer func() { _ = rrSrv.Process.Kill(); _ = rrSrv.Wait() }()
	time.Sleep(300 * time.Millisecond) // the servers bind
	secs := strconv.Itoa(int(o.Duration.Seconds()))
	m := map[string]float64{}
	if first && len(p.Gateways) > 0 {
		// Connected (the rung's check passed) and nothing measured yet.
		for _, g := range p.Gateways {
			m["gateway-rss-idle"] = max(m["gateway-rss-idle"], statusMiB(g.Process.Pid, "VmRSS:"))
			// The rest is the executable's pages, shared through the page cache by every
			// gateway on the node.
			m["gateway-anon-idle"] = max(m["gateway-anon-idle"], statusMiB(g.Process.Pid, "RssAnon:"))
		}
	}

	procs := []int{srv.Process.Pid}
	for _, g := range p.Gateways {
		procs = append(procs, g.Process.Pid)
	}
	cpuOf := func() float64 {
		var s float64
		for _, pid := range procs {
			s += cpuSeconds(pid)
		}
		return s
	}
	var profiling sync.WaitGroup
	if profile != "" {
		for i, ns := range p.Profiled {
			profiling.Go(func() {
				url := fmt.Sprintf("http://127.0.0.1:9471/debug/pprof/profile?seconds=%d", max(1, int(o.Duration.Seconds())-1))
				if err := ns.run("curl", "-sf", "-o", fmt.Sprintf("%s-gateway%d.pprof", profile, i), url); err != nil {
					fmt.Fprintf(e.Log, "profile of %s: %v\n", ns, err)
				}
			})
		}
	}
	before := cpuOf()
	r, clientCPU, err := iperf(ctx, p, "-t", secs)
	profiling.Wait()
	if err != nil {
		return nil, err
	}
	m["tcp1"] = r.End.SumReceived.BitsPerSecond / 1e6
	if gb := r.End.SumReceived.Bytes / 1e9; gb > 0 {
		m["cpu-per-gb"] = (cpuOf() - before + clientCPU) / gb
	}
	if r, _, err = iperf(ctx, p, "-t", secs, "-R"); err != nil {
		return nil, err
	}
	m["tcp1-reverse"] = r.End.SumReceived.BitsPerSecond / 1e6
	if p.wants("tcp10") {
		if r, _, err = iperf(ctx, p, "-t", secs, "-P", "10"); err != nil {
			return nil, err
		}
		m["tcp10"] = r.End.SumReceived.BitsPerSecond / 1e6
	}
	if !mo.contended && p.wants("tcp10-reverse") {
		if r, _, err = iperf(ctx, p, "-t", secs, "-P", "10", "-R"); err != nil {
			return nil, err
		}
		m["tcp10-reverse"] = r.End.SumReceived.BitsPerSecond / 1e6
	}
	for _, u := range []struct {
		key  string
		size int
	}{{"udp64", 64}, {"udpmtu", InnerMTU - 28}} {
		if mo.contended || !p.wants(u.key+"-pps") {
			break
		}
		if r, _, err = iperf(ctx, p, "-t", secs, "-u", "-b", "0", "-l", strconv.Itoa(u.size)); err != nil {
			return nil, err
		}
		if r.End.Sum.Seconds > 0 {
			m[u.key+"-pps"] = (r.End.Sum.Packets - r.End.Sum.LostPackets) / r.End.Sum.Seconds / 1000
		}
		m[u.key+"-loss"] = r.End.Sum.LostPercent
	}
	count := "5000"
	if o.Quick {
		count = "500"
	}
	out, err := p.Client.output(filepath.Join(e.Bin, "skein-probe"), "rr", "--count", count, net.JoinHostPort(p.Addr, "7073"))
	if err != nil {
		return nil, err
	}
	f := strings.Fields(out)
	if len(f) != 8 {
		return nil, fmt.Errorf("skein-probe rr: unexpected output %q", out)
	}
	m["rr-p50"], _ = strconv.ParseFloat(f[3], 64)
	m["rr-p99"], _ = strconv.ParseFloat(f[7], 64)
	peak := func() float64 {
		var rss float64
		for _, g := range p.Gateways {
			rss = max(rss, peakRSSMiB(g.Process.Pid))
		}
		return rss
	}
	if mo.contended {
		// Only what contendedMetrics names (the gateways' idle RSS is not among them).
		for k := range m {
			if !slices.Contains(contendedMetrics, k) {
				delete(m, k)
			}
		}
		return m, nil
	}
	if len(p.Gateways) > 0 && p.wants("gateway-rss-32") {
		// The gateways' high-water mark after the tests so far (1 and 10 streams, UDP), then
		// after 32 parallel streams.
		m["gateway-rss"] = peak()
		if _, _, err = iperf(ctx, p, "-t", secs, "-P", "32"); err != nil {
			return nil, err
		}
		m["gateway-rss-32"] = peak()
	}
	return m, nil
}
