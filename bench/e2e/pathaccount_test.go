package e2e

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/skein-net/skein/bench/harness"
	"github.com/skein-net/skein/bench/lab"
	"github.com/skein-net/skein/control/probe"
)

// TestPathAccount is the hop-by-hop account of the path between two pods (issue #39): the
// lab, skein installed with Helm in both clusters and peered with skeinctl, probe pods on every
// node; then, interleaved, single-stream TCP between two pods of cluster 0 on different nodes
// (local, flannel), from a pod of cluster 0 to one of cluster 1 (fabric) and over bare
// wireguard-go from the same pod to the remote pod's node, each both ways, the pods on nodes
// that do not run the gateway, as skeinctl bench picks them. Around every run it
// reads the kernel's counters of every namespace on the path (each node, each gateway pod, the
// two probes, the router): packets and bytes per interface, IP fragments created and
// reassembled, drops, retransmissions, ICMP errors; and the machine's CPU by kind (user,
// system, softirq). One more fabric run is sampled by perf, and its CPU is put by hop
// (harness.ParseHopProfile). It runs only when SKEIN_PATH_ACCOUNT is set:
//
//	SKEIN_PATH_ACCOUNT=1 go test -count 1 -v -timeout 30m -run '^TestPathAccount$' ./bench/e2e/
//
// SKEIN_PATH_ACCOUNT_ROUNDS (default 3) and SKEIN_PATH_ACCOUNT_SECONDS (default 8) set the
// rounds and each run's length; SKEIN_PATH_ACCOUNT_OUT a file for the markdown report,
// SKEIN_PATH_ACCOUNT_JSON one for the runs as harness.LabRuns (make bench's lab rung reads
// it); SKEIN_PATH_ACCOUNT_PERF=0 leaves out the run under perf.
func TestPathAccount(t *testing.T) {
	if os.Getenv("SKEIN_PATH_ACCOUNT") == "" {
		t.Skip("the path account runs on request (SKEIN_PATH_ACCOUNT=1): it loads the machine for minutes")
	}
	rounds, _ := strconv.Atoi(cmp.Or(os.Getenv("SKEIN_PATH_ACCOUNT_ROUNDS"), "3"))
	secs, _ := strconv.Atoi(cmp.Or(os.Getenv("SKEIN_PATH_ACCOUNT_SECONDS"), "8"))
	e := setupLab(t, os.Getenv("KEEP") != "", lab.Options{Prefix: os.Getenv("SKEIN_PATH_ACCOUNT_PREFIX")})
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	e.install(ctx, 1)
	e.connect(ctx)
	e.probes(ctx)

	gw := []corev1.Pod{e.activeGatewayFor(ctx, 0, 1), e.activeGatewayFor(ctx, 1, 0)}
	off := func(i int) (on, notOn corev1.Pod) { // cluster i's probe pods on and off the gateway's node
		for _, p := range e.probePods(ctx, i) {
			if p.Spec.NodeName == gw[i].Spec.NodeName {
				on = p
			} else {
				notOn = p
			}
		}
		if on.Name == "" || notOn.Name == "" {
			t.Fatalf("cluster %d: want a probe pod on the gateway's node %s and one off it", i, gw[i].Spec.NodeName)
		}
		return on, notOn
	}
	localSrv, client := off(0)
	_, remoteSrv := off(1)
	view, _ := e.peerView(ctx, 0)
	remoteAddr := view.of(netip.MustParseAddr(remoteSrv.Status.PodIP))

	// The namespaces on the path and around it, by name.
	spaces := map[string]string{
		"c0 client " + client.Spec.NodeName:         e.podNS(0, client),
		"c0 local server " + localSrv.Spec.NodeName: e.podNS(0, localSrv),
		"c1 server " + remoteSrv.Spec.NodeName:      e.podNS(1, remoteSrv),
		"c0 gateway " + gw[0].Spec.NodeName:         e.podNS(0, gw[0]),
		"c1 gateway " + gw[1].Spec.NodeName:         e.podNS(1, gw[1]),
		"router":                                    e.l.Topology.Router.Name,
	}
	for i, c := range e.l.Clusters {
		for j := range c.Nodes {
			spaces[fmt.Sprintf("c%d node %s", i, c.NodeName(j))] = c.Nodes[j].Name
		}
	}
	e.reportf("path account: client %s on %s; local server %s on %s (%s); remote server %s on %s (%s, seen here as %s); gateways on %s and %s",
		client.Name, client.Spec.NodeName, localSrv.Name, localSrv.Spec.NodeName, localSrv.Status.PodIP,
		remoteSrv.Name, remoteSrv.Spec.NodeName, remoteSrv.Status.PodIP, remoteAddr, gw[0].Spec.NodeName, gw[1].Spec.NodeName)

	type run struct {
		name    string
		target  string
		reverse bool
	}
	runs := []run{{harness.LabLocal, localSrv.Status.PodIP, false}, {harness.LabLocalReverse, localSrv.Status.PodIP, true},
		{harness.LabFabric, remoteAddr.String(), false}, {harness.LabFabricReverse, remoteAddr.String(), true}}
	if wgAddr := e.bareWireGuard(ctx, client, remoteSrv.Spec.NodeName); wgAddr != "" {
		runs = append(runs, run{harness.LabBareWG, wgAddr, false}, run{harness.LabBareWGReverse, wgAddr, true})
	}
	type sample struct {
		mbps    float64
		bytes   int64
		cpu     cpuTimes
		kernel  map[string]map[string]int64 // namespace -> counter -> delta
		gateway [2]float64                  // CPU seconds of each gateway process
	}
	results := map[string][]sample{}
	gwPID := [2]int{e.gatewayProcess(0, gw[0]), e.gatewayProcess(1, gw[1])}
	for r := range rounds {
		order := slices.Clone(runs)
		if r%2 == 1 {
			slices.Reverse(order)
		}
		for _, rn := range order {
			before := snapshot(ctx, spaces)
			cpu0 := readCPU()
			g0 := [2]float64{procCPU(gwPID[0]), procCPU(gwPID[1])}
			args := []string{"tput", "--duration", fmt.Sprintf("%ds", secs)}
			if rn.reverse {
				args = append(args, "--reverse")
			}
			out, err := e.probe(ctx, e.podNS(0, client), append(args, rn.target)...)
			if err != nil {
				t.Fatalf("%s: skein-probe %v: %v: %s", rn.name, args, err, out)
			}
			cpu := readCPU().sub(cpu0)
			after := snapshot(ctx, spaces)
			var tp probe.Throughput
			if err := json.Unmarshal([]byte(out), &tp); err != nil {
				t.Fatalf("%s: %v: %s", rn.name, err, out)
			}
			s := sample{mbps: tp.BitsPerSecond / 1e6, bytes: tp.Bytes, cpu: cpu, kernel: diff(before, after),
				gateway: [2]float64{procCPU(gwPID[0]) - g0[0], procCPU(gwPID[1]) - g0[1]}}
			results[rn.name] = append(results[rn.name], s)
			e.reportf("round %d %s: %.0f Mbit/s; CPU busy %.2f of %d (softirq %.2f); gateways %.2f, %.2f cores",
				r+1, rn.name, s.mbps, cpu.busy()/cpu.seconds(), cpu.cpus, cpu.softirq/cpu.seconds(), s.gateway[0]/cpu.seconds(), s.gateway[1]/cpu.seconds())
		}
	}

	var rep strings.Builder
	fmt.Fprintf(&rep, "### Single stream, %d rounds of %d s, interleaved\n\n", rounds, secs)
	fmt.Fprintf(&rep, "| run | Mbit/s (each round) | CPU s/GB: all | user | system | softirq | gateways' cores |\n|---|---|---|---|---|---|---|\n")
	for _, rn := range runs {
		var mb []string
		var all, user, sys, soft, gb, gwc float64
		for _, s := range results[rn.name] {
			mb = append(mb, fmt.Sprintf("%.0f", s.mbps))
			g := float64(s.bytes) / 1e9
			gb += g
			all += s.cpu.busy()
			user += s.cpu.user
			sys += s.cpu.system
			soft += s.cpu.softirq
			gwc += (s.gateway[0] + s.gateway[1]) / s.cpu.seconds()
		}
		n := float64(len(results[rn.name]))
		fmt.Fprintf(&rep, "| %s | %s | %.2f | %.2f | %.2f | %.2f | %.2f |\n", rn.name, strings.Join(mb, ", "), all/gb, user/gb, sys/gb, soft/gb, gwc/n)
	}
	// Request/response latency (1 byte over one TCP connection), interleaved.
	lat := map[string][]probe.Latency{}
	for range rounds {
		for _, rn := range runs {
			if rn.reverse {
				continue
			}
			out, err := e.probe(ctx, e.podNS(0, client), "latency", "--duration", "3s", rn.target)
			var l probe.Latency
			if err != nil || json.Unmarshal([]byte(out), &l) != nil {
				t.Fatalf("%s: latency: %v: %s", rn.name, err, out)
			}
			lat[rn.name] = append(lat[rn.name], l)
		}
	}
	fmt.Fprintf(&rep, "\n### Request/response latency, 1 byte, %d rounds of 3 s\n\n| run | p50 us (each round) | p99 us (each round) |\n|---|---|---|\n", rounds)
	for _, rn := range runs {
		if rn.reverse {
			continue
		}
		var p50, p99 []string
		for _, l := range lat[rn.name] {
			p50 = append(p50, strconv.FormatInt(l.P50Micro, 10))
			p99 = append(p99, strconv.FormatInt(l.P99Micro, 10))
		}
		fmt.Fprintf(&rep, "| %s | %s | %s |\n", rn.name, strings.Join(p50, ", "), strings.Join(p99, ", "))
	}
	if out := os.Getenv("SKEIN_PATH_ACCOUNT_JSON"); out != "" {
		lr := harness.LabRuns{Rounds: rounds, Seconds: secs, Mbps: map[string][]float64{}, CPUPerGB: map[string][]float64{},
			P50: map[string][]float64{}, P99: map[string][]float64{}, Fragments: map[string][]int64{},
			Placement: fmt.Sprintf("client %s on %s, local server on %s, remote server on %s; gateways on %s and %s",
				client.Name, client.Spec.NodeName, localSrv.Spec.NodeName, remoteSrv.Spec.NodeName, gw[0].Spec.NodeName, gw[1].Spec.NodeName)}
		for _, rn := range runs {
			for _, s := range results[rn.name] {
				lr.Mbps[rn.name] = append(lr.Mbps[rn.name], s.mbps)
				if s.bytes > 0 {
					lr.CPUPerGB[rn.name] = append(lr.CPUPerGB[rn.name], s.cpu.busy()/(float64(s.bytes)/1e9))
				}
				lr.Fragments[rn.name] = append(lr.Fragments[rn.name], fragments(s.kernel))
			}
			for _, l := range lat[rn.name] {
				lr.P50[rn.name] = append(lr.P50[rn.name], float64(l.P50Micro))
				lr.P99[rn.name] = append(lr.P99[rn.name], float64(l.P99Micro))
			}
		}
		b, err := json.MarshalIndent(lr, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(out, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// Kernel counters of the last round of each run, per namespace, per GB carried.
	for _, rn := range runs {
		s := results[rn.name][len(results[rn.name])-1]
		fmt.Fprintf(&rep, "\n### Counters, %s (last round, %.2f GB; per namespace, what changed)\n\n", rn.name, float64(s.bytes)/1e9)
		names := make([]string, 0, len(s.kernel))
		for n := range s.kernel {
			names = append(names, n)
		}
		slices.Sort(names)
		for _, n := range names {
			var parts []string
			keys := make([]string, 0, len(s.kernel[n]))
			for k := range s.kernel[n] {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			for _, k := range keys {
				parts = append(parts, fmt.Sprintf("%s %d", k, s.kernel[n][k]))
			}
			if len(parts) > 0 {
				fmt.Fprintf(&rep, "- **%s**: %s\n", n, strings.Join(parts, ", "))
			}
		}
	}

	// One more fabric run under perf: CPU by hop.
	if os.Getenv("SKEIN_PATH_ACCOUNT_PERF") == "0" {
		fmt.Fprintf(&rep, "\n(no run under perf: SKEIN_PATH_ACCOUNT_PERF=0)\n")
	} else if _, err := exec.LookPath("perf"); err == nil {
		dir := t.TempDir()
		data := filepath.Join(dir, "perf.data")
		rec := exec.CommandContext(ctx, "perf", "record", "-a", "-g", "-e", "cpu-clock", "-F", "499", "-o", data, "--", "sleep", strconv.Itoa(secs+1))
		var recOut bytes.Buffer
		rec.Stdout, rec.Stderr = &recOut, &recOut
		if err := rec.Start(); err != nil {
			t.Fatalf("perf record: %v", err)
		}
		time.Sleep(500 * time.Millisecond)
		out, err := e.probe(ctx, e.podNS(0, client), "tput", "--duration", fmt.Sprintf("%ds", secs), remoteAddr.String())
		_ = rec.Wait()
		var tp probe.Throughput
		if err != nil || json.Unmarshal([]byte(out), &tp) != nil {
			t.Fatalf("profiled run: %v: %s", err, out)
		}
		script := exec.CommandContext(ctx, "perf", "script", "-i", data, "-F", "comm,pid,period,ip,sym,dso")
		sout, err := script.Output()
		if err != nil {
			t.Fatalf("perf script: %v (perf record said: %s)", err, recOut.String())
		}
		prof, err := harness.ParseHopProfile(bytes.NewReader(sout), e.inLab())
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&rep, "\n### CPU by hop, one fabric run under perf (%.0f Mbit/s, %.2f GB, %d samples)\n\n%s",
			tp.BitsPerSecond/1e6, float64(tp.Bytes)/1e9, prof.Samples, prof.Markdown(float64(tp.Bytes)/1e9))
	} else {
		fmt.Fprintf(&rep, "\n(no perf: the CPU by hop needs Debian's linux-perf)\n")
	}
	e.reportf("%s", rep.String())
	if out := os.Getenv("SKEIN_PATH_ACCOUNT_OUT"); out != "" {
		if err := os.WriteFile(out, []byte(rep.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// fragments is the IP fragments created and the reassembly requests of a run, summed over
// the namespaces of kernel (namespace -> counter -> delta).
func fragments(kernel map[string]map[string]int64) int64 {
	var n int64
	for _, c := range kernel {
		n += c["Ip:FragCreates"] + c["Ip:ReasmReqds"]
	}
	return n
}

// cpuTimes is the machine's CPU time by kind, in seconds, from /proc/stat.
type cpuTimes struct {
	user, system, softirq, irq, idle, steal float64
	cpus                                    int
}

func (c cpuTimes) busy() float64    { return c.user + c.system + c.softirq + c.irq + c.steal }
func (c cpuTimes) seconds() float64 { return (c.busy() + c.idle) / float64(max(c.cpus, 1)) }

func (c cpuTimes) sub(o cpuTimes) cpuTimes {
	return cpuTimes{user: c.user - o.user, system: c.system - o.system, softirq: c.softirq - o.softirq,
		irq: c.irq - o.irq, idle: c.idle - o.idle, steal: c.steal - o.steal, cpus: c.cpus}
}

func readCPU() cpuTimes {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return cpuTimes{}
	}
	var c cpuTimes
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 9 {
			continue
		}
		if f[0] != "cpu" {
			if strings.HasPrefix(f[0], "cpu") {
				c.cpus++
			}
			continue
		}
		v := func(i int) float64 { x, _ := strconv.ParseFloat(f[i], 64); return x / 100 } // USER_HZ
		c.user, c.system, c.idle, c.irq, c.softirq, c.steal = v(1)+v(2), v(3), v(4)+v(5), v(6), v(7), v(8)
	}
	return c
}

// procCPU is a process's CPU seconds (user and system).
func procCPU(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	u, _ := strconv.ParseFloat(f[11], 64)
	k, _ := strconv.ParseFloat(f[12], 64)
	return (u + k) / 100
}

// The kernel counters read in each namespace: /proc/net/snmp and /proc/net/netstat (these
// only), and every interface's packets, bytes and drops from /proc/net/dev.
var countersRead = map[string]bool{
	"Ip:FragCreates": true, "Ip:FragOKs": true, "Ip:FragFails": true, "Ip:ReasmReqds": true, "Ip:ReasmOKs": true,
	"Ip:ReasmFails": true, "Ip:InDiscards": true, "Ip:OutDiscards": true, "Ip:InHdrErrors": true, "Ip:InAddrErrors": true,
	"Ip:OutNoRoutes": true, "Icmp:OutDestUnreachs": true, "Icmp:InDestUnreachs": true,
	"Tcp:RetransSegs": true, "Tcp:InErrs": true, "Udp:InErrors": true, "Udp:RcvbufErrors": true, "Udp:SndbufErrors": true,
	"Udp:NoPorts": true, "TcpExt:TCPLostRetransmit": true, "TcpExt:TCPSackRecovery": true, "TcpExt:TCPTimeouts": true,
	"TcpExt:TCPBacklogDrop": true, "TcpExt:TCPRcvQDrop": true,
}

// snapshot reads the counters of every namespace (name -> netns name or /proc path).
func snapshot(ctx context.Context, spaces map[string]string) map[string]map[string]int64 {
	out := map[string]map[string]int64{}
	for name, ns := range spaces {
		b, err := inNS(ctx, ns, "cat", "/proc/self/net/snmp", "/proc/self/net/netstat", "/proc/self/net/dev").Output()
		if err != nil {
			continue
		}
		out[name] = parseCounters(b)
	}
	return out
}

// parseCounters reads snmp/netstat's pairs of header and value lines and /proc/net/dev's
// table into "Proto:Name" and "dev IF rx-packets" style keys.
func parseCounters(b []byte) map[string]int64 {
	m := map[string]int64{}
	lines := strings.Split(string(b), "\n")
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if name, rest, ok := strings.Cut(l, ":"); ok && !strings.Contains(name, " ") && i+1 < len(lines) && strings.HasPrefix(lines[i+1], name+":") {
			keys := strings.Fields(rest)
			vals := strings.Fields(strings.TrimPrefix(lines[i+1], name+":"))
			for j := range min(len(keys), len(vals)) {
				if k := name + ":" + keys[j]; countersRead[k] {
					v, _ := strconv.ParseInt(vals[j], 10, 64)
					m[k] = v
				}
			}
			i++
			continue
		}
		// /proc/net/dev: "  eth0: rxbytes rxpackets rxerrs rxdrop ... txbytes txpackets txerrs txdrop ..."
		if dev, rest, ok := strings.Cut(l, ":"); ok && !strings.Contains(l, "|") {
			f := strings.Fields(rest)
			if len(f) < 16 {
				continue
			}
			if _, err := strconv.ParseInt(f[0], 10, 64); err != nil {
				continue
			}
			dev = strings.TrimSpace(dev)
			if dev == "lo" {
				continue
			}
			n := func(j int) int64 { v, _ := strconv.ParseInt(f[j], 10, 64); return v }
			m["dev "+dev+" rx-pkts"] = n(1)
			m["dev "+dev+" rx-bytes"] = n(0)
			m["dev "+dev+" rx-drop"] = n(3)
			m["dev "+dev+" tx-pkts"] = n(9)
			m["dev "+dev+" tx-bytes"] = n(8)
			m["dev "+dev+" tx-drop"] = n(11)
		}
	}
	return m
}

// diff is after - before for every counter that changed, with a device's bytes turned into
// its mean packet size ("rx-avg", "tx-avg") when packets moved (GSO superpackets show as
// packets larger than the MTU; thousands of packets of a few bytes are not the stream).
func diff(before, after map[string]map[string]int64) map[string]map[string]int64 {
	out := map[string]map[string]int64{}
	for ns, a := range after {
		d := map[string]int64{}
		for k, v := range a {
			if x := v - before[ns][k]; x != 0 {
				d[k] = x
			}
		}
		for k, pk := range d {
			if dev, ok := strings.CutSuffix(k, " rx-pkts"); ok && pk >= 1000 {
				d[dev+" rx-avg"] = d[dev+" rx-bytes"] / pk
			}
			if dev, ok := strings.CutSuffix(k, " tx-pkts"); ok && pk >= 1000 {
				d[dev+" tx-avg"] = d[dev+" tx-bytes"] / pk
			}
		}
		for k, v := range d {
			// Bytes are in the averages; small packet counts are the control plane's chatter.
			if strings.HasSuffix(k, "-bytes") || (strings.HasSuffix(k, "-pkts") && v < 1000) {
				delete(d, k)
			}
		}
		if len(d) > 0 {
			out[ns] = d
		}
	}
	return out
}

// bareWireGuard runs stock wireguard-go between the client pod's network namespace and the
// host network of cluster 1's node (a TUN device at each end, tunnel MTU 1340, the same
// underlay path between the clusters as skein's WireGuard: the pod's node masquerades it to
// the router), with skein-probe's measurement server at the node's end; it returns the
// node's tunnel address, or "" when wg is missing. The cleanup stops both and removes the
// devices.
func (e *env) bareWireGuard(ctx context.Context, client corev1.Pod, node string) string {
	t := e.t
	if _, err := exec.LookPath("wg"); err != nil {
		t.Logf("no bare wireguard-go run: wg (Debian package wireguard-tools) is missing")
		return ""
	}
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := harness.Prepare(ctx, dir); err != nil {
		t.Fatal(err)
	}
	nodeNS := e.nodeNS(1, node)
	var nodeAddr netip.Addr
	for j, n := range e.l.Topology.Clusters[1].Nodes {
		if n.Name == nodeNS {
			nodeAddr = e.l.Topology.Clusters[1].Nodes[j].Addr
		}
	}
	type end struct {
		ns, dev, in, key, pub string
	}
	pid := os.Getpid() % 10000
	ends := []*end{{ns: e.podNS(0, client), dev: fmt.Sprintf("pawc%d", pid), in: "10.97.0.1"}, {ns: nodeNS, dev: fmt.Sprintf("paws%d", pid), in: "10.97.0.2"}}
	for _, x := range ends {
		key, err := exec.Command("wg", "genkey").Output()
		if err != nil {
			t.Fatal(err)
		}
		x.key = strings.TrimSpace(string(key))
		pub := exec.Command("wg", "pubkey")
		pub.Stdin = strings.NewReader(x.key)
		out, err := pub.Output()
		if err != nil {
			t.Fatal(err)
		}
		x.pub = strings.TrimSpace(string(out))
	}
	for i, x := range ends {
		cmd := inNS(ctx, x.ns, filepath.Join(dir, "wireguard-go"), "-f", x.dev)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			_ = inNS(context.Background(), x.ns, "ip", "link", "del", x.dev).Run()
			_ = os.Remove("/var/run/wireguard/" + x.dev + ".sock")
		})
		sock := "/var/run/wireguard/" + x.dev + ".sock"
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			if _, err := os.Stat(sock); err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("wireguard-go %s: no %s", x.dev, sock)
			}
		}
		keyFile := filepath.Join(dir, x.dev+".key")
		if err := os.WriteFile(keyFile, []byte(x.key+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		peer := ends[1-i]
		set := []string{"wg", "set", x.dev, "private-key", keyFile, "listen-port", "51999", "peer", peer.pub, "allowed-ips", peer.in + "/32"}
		if i == 0 {
			set = append(set, "endpoint", nodeAddr.String()+":51999")
		}
		for _, c := range [][]string{set, {"ip", "addr", "add", x.in + "/24", "dev", x.dev}, {"ip", "link", "set", x.dev, "mtu", "1340", "up"}} {
			if out, err := inNS(ctx, x.ns, c...).CombinedOutput(); err != nil {
				t.Fatalf("%v: %v: %s", c, err, out)
			}
		}
	}
	srv := inNS(ctx, nodeNS, filepath.Join(e.bin, "skein-probe"), "serve", "--tcp", ends[1].in+":17070", "--udp", ends[1].in+":17071", "--http", ends[1].in+":17072",
		"--echo", ends[1].in+":7073", "--throughput", ends[1].in+":7074", "--rate", ends[1].in+":7075")
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Process.Kill(); _ = srv.Wait() })
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		if out, err := e.probe(ctx, ends[0].ns, "call", "tcp", ends[1].in+":17070"); err == nil {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("bare wireguard-go: no answer through the tunnel: %v: %s", err, out)
		}
	}
	return ends[1].in
}

// inLab tells the lab's processes (those in its named network namespaces, its pods' and the
// measuring probe's) from the machine's others, by network namespace, as of now.
func (e *env) inLab() func(pid int) bool {
	netnsOf := func(path string) uint64 {
		var st syscall.Stat_t
		if err := syscall.Stat(path, &st); err != nil {
			return 0
		}
		return st.Ino
	}
	lab := map[uint64]bool{}
	named, _ := filepath.Glob("/run/netns/" + e.prefix + "-*")
	for _, n := range named {
		lab[netnsOf(n)] = true
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cgroup")
	for _, c := range procs {
		b, err := os.ReadFile(c)
		if err == nil && bytes.Contains(b, []byte("skein-lab/"+e.prefix+"-")) {
			lab[netnsOf(filepath.Join(filepath.Dir(c), "ns", "net"))] = true
		}
	}
	delete(lab, 0)
	return func(pid int) bool { return lab[netnsOf(fmt.Sprintf("/proc/%d/ns/net", pid))] }
}
