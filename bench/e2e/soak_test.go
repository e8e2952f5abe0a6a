package e2e

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"net/netip"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestSoak is make soak: the lab peered with two gateway replicas per side, UDP traffic from a
// pod of cluster 0 to a pod of cluster 1 for the whole run (a datagram every 20 ms), and, every
// soakPeriod, one disturbance in turn: a graceful delete of cluster 1's active gateway, a
// restart of cluster 0's agent on the sending pod's node, a restart of cluster 0's
// kube-apiserver, a SIGKILL of cluster 1's active gateway, a restart of cluster 1's
// kube-apiserver. It reports every gap in the traffic longer than 200 ms with the disturbance
// before it, and the RSS, goroutines, open FDs and heap of every skein process at the start,
// every sixth of the run and the end. It fails on a gap longer than 200 ms after a
// kube-apiserver restart or after nothing (the data plane must not notice the control plane),
// on a gap longer than 15 s after any disturbance, and when a process that lived through the
// run grew: goroutines or FDs at the end above the first half's highest by more than 10% + 5,
// RSS above it by more than 25% + 8 MiB. SKEIN_SOAK is the duration (make soak DURATION=30m).
func TestSoak(t *testing.T) {
	v := os.Getenv("SKEIN_SOAK")
	if v == "" {
		t.Skip("the soak runs with make soak DURATION=30m (SKEIN_SOAK=30m)")
	}
	dur, err := time.ParseDuration(v)
	if err != nil || dur < 2*time.Minute || dur > 12*time.Hour {
		t.Fatalf("SKEIN_SOAK=%q: want a duration from 2m to 12h", v)
	}
	e := setup(t, false)
	defer func() { fmt.Printf("\n=== skein soak report (%s)\n%s\n", dur, e.report.String()) }()
	ctx, cancel := context.WithTimeout(context.Background(), dur+15*time.Minute)
	defer cancel()
	if !t.Run("install", func(t *testing.T) { e.t = t; e.install(ctx, 2) }) {
		return
	}
	e.probes(ctx)
	if !t.Run("connect", func(t *testing.T) { e.t = t; e.connect(ctx) }) {
		return
	}
	e.t = t
	s := &soak{e: e, dur: dur, period: soakPeriod(dur)}
	s.run(ctx)
}

// soakPeriod is the time between disturbances: 2 minutes, or a sixth of a short run.
func soakPeriod(d time.Duration) time.Duration {
	return min(2*time.Minute, d/6)
}

type soak struct {
	e      *env
	dur    time.Duration
	period time.Duration
	start  time.Time
	events []soakEvent
	// samples[k] is the k-th round of scrapes, by process.
	samples []map[procKey]procSample
}

type soakEvent struct {
	at      time.Time
	what    string
	dataGap bool // the disturbance may stop traffic for a moment (a gateway or the agent on its path)
}

// procKey names one process: its pod and its start time (a restarted container is a new one).
type procKey struct {
	cluster   int
	component string
	pod       string
	started   float64
}

type procSample struct {
	rss, heap, goroutines, fds float64
}

type soakGap struct {
	end time.Time
	gap time.Duration
}

func (s *soak) run(ctx context.Context) {
	e := s.e
	src := e.probePods(ctx, 0)[0]
	dst := e.probePods(ctx, 1)[0]
	dstAs, _ := e.peerView(ctx, 0)
	target := dstAs.of(netip.MustParseAddr(dst.Status.PodIP)).String() + ":7071"
	e.reportf("soak: %s, UDP every 20 ms from c0 %s (%s) to c1 %s as %s; a disturbance every %s",
		s.dur, src.Name, src.Spec.NodeName, dst.Name, target, s.period)

	s.start = time.Now()
	end := s.start.Add(s.dur)
	traffic := make(chan []soakGap, 1)
	trafficErr := make(chan string, 1)
	go func() { // no t.Fatal here: results go back by channel
		var gaps []soakGap
		var errs []string
		for {
			left := time.Until(end)
			if left < time.Second {
				break
			}
			d := min(left, 5*time.Minute)
			began := time.Now()
			out, err := e.probe(ctx, e.podNS(0, src), "stream", "--interval", "20ms", "--duration", d.String(), "--gaps", "200ms", target)
			if err != nil {
				errs = append(errs, fmt.Sprintf("stream at +%s: %v: %s", s.since(began), err, out))
				continue
			}
			sc := bufio.NewScanner(strings.NewReader(out))
			for sc.Scan() {
				var ms, at int64
				if n, _ := fmt.Sscanf(sc.Text(), "gap-ms %d ending-at-ms %d", &ms, &at); n == 2 {
					gaps = append(gaps, soakGap{end: began.Add(time.Duration(at) * time.Millisecond), gap: time.Duration(ms) * time.Millisecond})
				}
			}
		}
		trafficErr <- strings.Join(errs, "\n")
		traffic <- gaps
	}()

	s.sample(ctx)
	disturb := []func(context.Context){
		func(ctx context.Context) { s.deleteActiveGateway(ctx, 1, false) },
		func(ctx context.Context) { s.restartAgent(ctx, 0, src.Spec.NodeName) },
		func(ctx context.Context) { s.restartAPIServer(ctx, 0) },
		func(ctx context.Context) { s.deleteActiveGateway(ctx, 1, true) },
		func(ctx context.Context) { s.restartAPIServer(ctx, 1) },
	}
	nextSample := s.start.Add(s.dur / 6)
	nextEvent := s.start.Add(s.period / 2)
	// SKEIN_SOAK_FIRST picks the first disturbance (0-4, in the order above), to reproduce one
	// sooner.
	first, _ := strconv.Atoi(os.Getenv("SKEIN_SOAK_FIRST"))
	for k := first; time.Now().Before(end.Add(-s.period / 2)); {
		now := time.Now()
		switch {
		case !now.Before(nextEvent):
			disturb[k%len(disturb)](ctx)
			k++
			nextEvent = nextEvent.Add(s.period)
		case !now.Before(nextSample):
			s.sample(ctx)
			nextSample = nextSample.Add(s.dur / 6)
		}
		select {
		case <-ctx.Done():
			e.t.Fatalf("soak: %v", ctx.Err())
		case <-time.After(time.Second):
		}
	}
	gaps := <-traffic
	if msg := <-trafficErr; msg != "" {
		e.t.Errorf("soak traffic: %s", msg)
	}
	s.sample(ctx)
	s.reportGaps(gaps)
	s.reportProcesses()
}

func (s *soak) since(t time.Time) time.Duration { return t.Sub(s.start).Round(100 * time.Millisecond) }

func (s *soak) event(what string, dataGap bool) {
	s.events = append(s.events, soakEvent{at: time.Now(), what: what, dataGap: dataGap})
	s.e.reportf("soak +%s: %s", s.since(time.Now()), what)
}

// deleteActiveGateway deletes cluster i's active gateway pod, gracefully or by SIGKILL of its
// processes (the kubelet then restarts the container).
func (s *soak) deleteActiveGateway(ctx context.Context, i int, kill bool) {
	e := s.e
	var pods corev1.PodList
	if err := e.c[i].List(ctx, &pods, client.MatchingLabels{"networking.liqo.io/active": "true"}); err != nil || len(pods.Items) != 1 {
		e.t.Errorf("soak: cluster %d: want one active gateway pod, got %d (%v)", i, len(pods.Items), err)
		return
	}
	a := pods.Items[0]
	if !kill {
		s.event(fmt.Sprintf("graceful delete of c%d's active gateway %s", i, a.Name), true)
		if err := e.c[i].Delete(ctx, &a); err != nil {
			e.t.Errorf("soak: delete %s: %v", a.Name, err)
		}
		return
	}
	s.event(fmt.Sprintf("SIGKILL of c%d's active gateway %s", i, a.Name), true)
	pids := e.containerPIDs(i, a)
	if len(pids) == 0 {
		e.t.Errorf("soak: no process in the active gateway pod %s", a.Name)
		return
	}
	for _, p := range pids {
		_ = exec.Command("kill", "-9", p).Run()
	}
}

// restartAgent deletes cluster i's agent pod on node (the DaemonSet starts another).
func (s *soak) restartAgent(ctx context.Context, i int, node string) {
	e := s.e
	var agents corev1.PodList
	if err := e.c[i].List(ctx, &agents, client.InNamespace("liqo"), client.MatchingLabels{"app.kubernetes.io/component": "agent"}); err != nil {
		e.t.Errorf("soak: list agents: %v", err)
		return
	}
	for _, a := range agents.Items {
		if a.Spec.NodeName == node && a.DeletionTimestamp == nil {
			s.event(fmt.Sprintf("delete of c%d's agent %s on %s", i, a.Name, node), true)
			if err := e.c[i].Delete(ctx, &a); err != nil {
				e.t.Errorf("soak: delete %s: %v", a.Name, err)
			}
			return
		}
	}
	e.t.Errorf("soak: cluster %d has no agent on %s", i, node)
}

// restartAPIServer stops cluster i's kube-apiserver (SIGTERM; the lab's supervisor starts it
// again a second after it exits) and reports how long the API was unavailable.
func (s *soak) restartAPIServer(ctx context.Context, i int) {
	e := s.e
	ns := e.l.Clusters[i].ControlPlane.Name
	pids, err := exec.Command("ip", "netns", "pids", ns).Output()
	if err != nil {
		e.t.Errorf("soak: pids of %s: %v", ns, err)
		return
	}
	pid := 0
	for _, p := range strings.Fields(string(pids)) {
		comm, _ := os.ReadFile("/proc/" + p + "/comm")
		if strings.TrimSpace(string(comm)) == "kube-apiserver" {
			pid, _ = strconv.Atoi(p)
		}
	}
	if pid == 0 {
		e.t.Errorf("soak: no kube-apiserver in %s", ns)
		return
	}
	s.event(fmt.Sprintf("restart of c%d's kube-apiserver (SIGTERM to pid %d)", i, pid), false)
	began := time.Now()
	_ = syscall.Kill(pid, syscall.SIGTERM)
	// Down first (the old process may answer for a moment while it drains), then up.
	for time.Since(began) < 30*time.Second && syscall.Kill(pid, 0) == nil {
		time.Sleep(100 * time.Millisecond)
	}
	for time.Since(began) < 2*time.Minute {
		var nodes corev1.NodeList
		if err := e.c[i].List(ctx, &nodes); err == nil {
			e.reportf("soak +%s: c%d's kube-apiserver answers again after %s", s.since(time.Now()), i, time.Since(began).Round(100*time.Millisecond))
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	e.t.Errorf("soak: cluster %d's kube-apiserver not back 2 minutes after its restart", i)
}

// sample scrapes every skein process of both clusters.
func (s *soak) sample(ctx context.Context) {
	e := s.e
	round := map[procKey]procSample{}
	for i := range 2 {
		for _, tg := range e.scrapeTargets(ctx, i) {
			text, err := e.scrape(ctx, tg)
			if err != nil {
				// A pod being replaced may not answer; the next round sees its successor.
				e.t.Logf("soak: scrape c%d %s %s: %v", i, tg.component, tg.pod.Name, err)
				continue
			}
			v := metricValues(text)
			k := procKey{cluster: i, component: tg.component, pod: tg.pod.Name, started: v["process_start_time_seconds"]}
			round[k] = procSample{rss: v["process_resident_memory_bytes"], heap: v["go_memstats_heap_inuse_bytes"],
				goroutines: v["go_goroutines"], fds: v["process_open_fds"]}
		}
	}
	s.samples = append(s.samples, round)
	e.t.Logf("soak +%s: sampled %d processes", s.since(time.Now()), len(round))
}

// metricValues reads the unlabelled samples of a scrape in the text format.
func metricValues(text string) map[string]float64 {
	v := map[string]float64{}
	for _, line := range strings.Split(text, "\n") {
		f := strings.Fields(line)
		if len(f) != 2 || strings.HasPrefix(line, "#") || strings.Contains(f[0], "{") {
			continue
		}
		if x, err := strconv.ParseFloat(f[1], 64); err == nil {
			v[f[0]] = x
		}
	}
	return v
}

// reportGaps reports every gap with the disturbance before it and fails on the ones the
// disturbance does not explain.
func (s *soak) reportGaps(gaps []soakGap) {
	e := s.e
	var longest time.Duration
	for _, g := range gaps {
		began := g.end.Add(-g.gap)
		var cause *soakEvent
		for k := range s.events {
			// The disturbance came before the traffic stopped (a second of slack for the
			// clocks of the stream and this process).
			if ev := &s.events[k]; !ev.at.After(began.Add(time.Second)) {
				cause = ev
			}
		}
		after := "after nothing"
		if cause != nil {
			after = fmt.Sprintf("%s after %q at +%s", began.Sub(cause.at).Round(100*time.Millisecond), cause.what, s.since(cause.at))
		}
		e.reportf("soak gap: %s ending at +%s, began %s", g.gap, s.since(g.end), after)
		longest = max(longest, g.gap)
		explained := cause != nil && cause.dataGap && began.Sub(cause.at) < 20*time.Second
		switch {
		case !explained:
			e.t.Errorf("soak: a %s gap in traffic at +%s that no gateway or agent disturbance explains (%s)", g.gap, s.since(began), after)
		case g.gap > 15*time.Second:
			e.t.Errorf("soak: a %s gap after %q, want at most 15 s", g.gap, cause.what)
		}
	}
	e.reportf("soak: %d disturbances, %d gaps longer than 200 ms, the longest %s", len(s.events), len(gaps), longest)
}

// reportProcesses prints, for every process alive at both ends, its first and last sample, and
// fails on growth; replacements started during the run are listed with their last sample.
func (s *soak) reportProcesses() {
	e := s.e
	first, last := s.samples[0], s.samples[len(s.samples)-1]
	half := s.samples[:max(1, (len(s.samples)+1)/2)]
	keys := make([]procKey, 0, len(last))
	for k := range last {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(a, b int) bool {
		x, y := keys[a], keys[b]
		if x.cluster != y.cluster {
			return x.cluster < y.cluster
		}
		if x.component != y.component {
			return x.component < y.component
		}
		return x.pod < y.pod
	})
	mib := func(b float64) string { return fmt.Sprintf("%.1f MiB", b/(1<<20)) }
	lived := 0
	for _, k := range keys {
		end := last[k]
		name := fmt.Sprintf("c%d %s %s", k.cluster, k.component, k.pod)
		start, ok := first[k]
		if !ok {
			e.reportf("soak process %s (started during the run): end RSS %s, heap %s, %0.f goroutines, %0.f FDs",
				name, mib(end.rss), mib(end.heap), end.goroutines, end.fds)
			continue
		}
		lived++
		var peak procSample
		for _, r := range half {
			if p, ok := r[k]; ok {
				peak = procSample{rss: math.Max(peak.rss, p.rss), heap: math.Max(peak.heap, p.heap),
					goroutines: math.Max(peak.goroutines, p.goroutines), fds: math.Max(peak.fds, p.fds)}
			}
		}
		e.reportf("soak process %s: RSS %s -> %s, heap %s -> %s, goroutines %0.f -> %0.f, FDs %0.f -> %0.f",
			name, mib(start.rss), mib(end.rss), mib(start.heap), mib(end.heap), start.goroutines, end.goroutines, start.fds, end.fds)
		if end.goroutines > peak.goroutines*1.1+5 {
			e.t.Errorf("soak: %s: %0.f goroutines at the end, at most %0.f in the first half", name, end.goroutines, peak.goroutines)
		}
		if end.fds > peak.fds*1.1+5 {
			e.t.Errorf("soak: %s: %0.f open FDs at the end, at most %0.f in the first half", name, end.fds, peak.fds)
		}
		if end.rss > peak.rss*1.25+8<<20 {
			e.t.Errorf("soak: %s: RSS %s at the end, at most %s in the first half", name, mib(end.rss), mib(peak.rss))
		}
	}
	if lived == 0 {
		e.t.Error("soak: no process lived through the run: nothing to compare")
	}
	e.reportf("soak: %d processes lived through the run, %d rounds of samples", lived, len(s.samples))
}
