package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/netip"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	netv1alpha1 "github.com/skein-net/skein/control/api/networking/v1alpha1"
	"github.com/skein-net/skein/control/probe"
)

type testNetOpts struct {
	networkOpts
	output       string
	keep         bool
	image        string
	hostNetwork  bool
	mtu          int
	checkTimeout time.Duration
	cleanupWait  time.Duration // how long to wait for the namespaces to be gone
}

func testCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "test", Short: "Test what skein set up, from inside the clusters"}
	cmd.AddCommand(testNetworkCmd(g))
	return cmd
}

func testNetworkCmd(g *globals) *cobra.Command {
	o := &testNetOpts{}
	cmd := &cobra.Command{
		Use:   "network",
		Short: "Check that every pod reaches every pod of the peer cluster, both ways, with the right source address",
		Long: `Deploy skein-probe pods on every node of both clusters (a DaemonSet in a throw-away namespace
skein-probe-<id>, and one on the host network), then check, from every probe to every probe of
the other cluster, both ways:

  TCP and UDP   a call to the far probe, which answers with the source address it saw; that
                address must be the caller's as the far cluster sees it (its Configuration's
                remapped pod CIDR; for the host network, its remapped external CIDR)
  ICMP          echo through the fabric (ICMPv6 over IPv6)
  PATH-MTU      a packet of exactly the tunnel MTU with Don't Fragment gets through, one byte
                more gets an ICMP frag-needed (ICMPv6 Packet Too Big) back, never a silent drop
  LATENCY       the median ICMP round trip (the TCP connect time without ICMP)

Each family the peer publishes a pod CIDR of is checked: IPv4, IPv6, or both for a dual-stack
peering (the addresses in FROM and TO say which; "family" in -o json), each pod from its address
of that family.

It prints a table (or JSON with -o json) and, when a check fails, what it found wrong along the
path: the Configuration, the gateways and their Connection, skein-agent on the nodes whose
checks failed, where those nodes route the peer's addresses (table 18952). Everything it
created is removed when it ends, also on failure and on Ctrl-C (--keep leaves it for
debugging; a namespace left by a killed run is removed by the next run after an hour).

The pod-network probes run as nobody with no capability (Pod Security "restricted"; ICMP
through the per-pod sysctl net.ipv4.ping_group_range). The host-network ones run as root with
NET_RAW only (for ICMP) and need a namespace Pod Security admits as "privileged": skeinctl
labels its namespace so. Pass --host-network=false where that is not allowed.

Exit status: 0 when every check passed, 1 otherwise.`,
		Example: `  skeinctl test network --remote-kubeconfig ~/.kube/cluster-b
  skeinctl test network --remote-kubeconfig ~/.kube/cluster-b -o json > result.json
  skeinctl test network --remote-context cluster-b --wait --timeout 5m`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			switch o.output {
			case "", "table", "json":
			default:
				return fmt.Errorf("--output %q: want table or json", o.output)
			}
			if o.mtu != 0 && (o.mtu < 576 || o.mtu > 9000) {
				return fmt.Errorf("--mtu %d: want 576-9000, or 0 for the gateways' MTU", o.mtu)
			}
			if o.checkTimeout < 100*time.Millisecond || o.checkTimeout > time.Minute {
				return fmt.Errorf("--check-timeout %s: want 100ms-1m", o.checkTimeout)
			}
			rep, err := g.testNetwork(c.Context(), o)
			if rep != nil {
				if o.output == "json" {
					b, _ := json.MarshalIndent(rep, "", "  ")
					fmt.Fprintln(g.out, string(b))
				} else {
					rep.print(g.out)
				}
			}
			if err != nil {
				return err
			}
			if !rep.OK {
				return fmt.Errorf("%d of %d checks failed", rep.Failed, rep.Failed+rep.Passed)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.remoteKubeconfig, "remote-kubeconfig", "", "kubeconfig of the remote cluster (this or --remote-context is required)")
	f.StringVar(&o.remoteContext, "remote-context", "", "kubeconfig context of the remote cluster (in --remote-kubeconfig, else in the local kubeconfig)")
	f.StringVar(&o.remoteLiqoNamespace, "remote-liqo-namespace", "liqo", "namespace skein is installed in, in the remote cluster")
	f.BoolVar(&o.wait, "wait", false, "first wait (up to --timeout) until the peering is Connected on both sides")
	f.StringVarP(&o.output, "output", "o", "table", "table or json")
	f.BoolVar(&o.keep, "keep", false, "leave the probe namespaces and pods in place, to debug with kubectl exec")
	f.StringVar(&o.image, "probe-image", "", "the skein-probe image (default: skein-probe beside the skein-controller image, same registry and tag)")
	f.BoolVar(&o.hostNetwork, "host-network", true, "also check from each node's host network (needs a privileged namespace)")
	f.IntVar(&o.mtu, "mtu", 0, "the tunnel MTU the path-MTU check expects (0: the peering's gateways' spec.mtu)")
	f.DurationVar(&o.checkTimeout, "check-timeout", 2*time.Second, "time allowed each check of one pair")
	f.DurationVar(&o.cleanupWait, "cleanup-wait", time.Minute, "how long to wait for the probe namespaces to be gone at the end (0: delete them and return)")
	return cmd
}

// view is how one cluster sees its peer: each of the peer's pod CIDRs and the prefix it is
// seen as here, and the same for its external CIDR.
type view struct {
	pods     []mapping
	external mapping // spec.remote.cidr.external (IPv6 in an IPv6-only cluster)
	// externals are every external CIDR of the peer (external and additionalExternals).
	externals        []mapping
	configured, seen bool // a Configuration exists; its status says how it is seen
}

// externalOf is the peer's external CIDR of a family (zero when it published none).
func (v view) externalOf(ipv6 bool) mapping {
	for _, m := range v.externals {
		if m.real.Addr().Is6() == ipv6 {
			return m
		}
	}
	return mapping{}
}

// hasFamily says whether the peer published a pod CIDR of a family that is mapped here.
func (v view) hasFamily(ipv6 bool) bool {
	return slices.ContainsFunc(v.pods, func(m mapping) bool { return m.real.Addr().Is6() == ipv6 })
}

type mapping struct{ real, seen netip.Prefix }

// of is how an address of the peer's pod network is seen here (invalid: not in any of its
// pod CIDRs).
func (v view) of(a netip.Addr) netip.Addr {
	for _, m := range v.pods {
		if m.real.Contains(a) {
			return remapAddr(a, m.seen)
		}
	}
	return netip.Addr{}
}

// remapAddr moves a into prefix to, keeping its host bits.
func remapAddr(a netip.Addr, to netip.Prefix) netip.Addr {
	if a.BitLen() != to.Addr().BitLen() {
		return netip.Addr{}
	}
	x, p := a.As16(), to.Masked().Addr().As16()
	bits := to.Bits()
	if a.Is4() {
		bits += 96
	}
	for i := range 16 {
		keep := byte(0)
		if n := bits - 8*i; n >= 8 {
			keep = 0xff
		} else if n > 0 {
			keep = ^byte(0xff >> n)
		}
		x[i] = p[i]&keep | x[i]&^keep
	}
	r := netip.AddrFrom16(x)
	if a.Is4() {
		r = r.Unmap()
	}
	return r
}

// peerView reads s's Configuration of its peer.
func peerView(ctx context.Context, s *side) (view, error) {
	var confs netv1alpha1.ConfigurationList
	if err := s.c.List(ctx, &confs, client.MatchingLabels{netv1alpha1.RemoteClusterIDLabel: s.peer.id}); err != nil {
		return view{}, err
	}
	if len(confs.Items) == 0 {
		return view{}, nil
	}
	v := view{configured: true}
	cf := confs.Items[0]
	if cf.Status.Remote == nil {
		return v, nil
	}
	real, seen := cf.Spec.Remote.CIDR.Pods(), cf.Status.Remote.CIDR.Pods()
	if len(real) != len(seen) {
		return v, nil
	}
	for i := range real {
		r, err1 := netip.ParsePrefix(string(real[i]))
		sn, err2 := netip.ParsePrefix(string(seen[i]))
		if err1 != nil || err2 != nil {
			return v, nil
		}
		v.pods = append(v.pods, mapping{r, sn})
	}
	real2, seen2 := cf.Spec.Remote.CIDR.All(), cf.Status.Remote.CIDR.All()
	for i := range min(len(real2), len(seen2)) {
		if f := real2[i].Field; f != "external" && !strings.HasPrefix(f, "additionalExternals") {
			continue
		}
		r, err1 := netip.ParsePrefix(string(real2[i].CIDR))
		sn, err2 := netip.ParsePrefix(string(seen2[i].CIDR))
		if err1 != nil || err2 != nil {
			continue
		}
		if real2[i].Field == "external" {
			v.external = mapping{r, sn}
		}
		v.externals = append(v.externals, mapping{r, sn})
	}
	v.seen = true
	return v, nil
}

// tunnelMTU is the MTU of s's gateways of the peering (spec.mtu), else the default.
func tunnelMTU(ctx context.Context, s *side) int {
	sel := client.MatchingLabels{netv1alpha1.RemoteClusterIDLabel: s.peer.id}
	var servers netv1alpha1.GatewayServerList
	if s.c.List(ctx, &servers, sel) == nil {
		for _, g := range servers.Items {
			if g.Spec.MTU > 0 {
				return int(g.Spec.MTU)
			}
		}
	}
	var clients netv1alpha1.GatewayClientList
	if s.c.List(ctx, &clients, sel) == nil {
		for _, g := range clients.Items {
			if g.Spec.MTU > 0 {
				return int(g.Spec.MTU)
			}
		}
	}
	return netv1alpha1.DefaultMTU
}

// endpointRef is one end of a checked pair.
type endpointRef struct {
	Cluster     string `json:"cluster"` // local or remote
	Node        string `json:"node"`
	Pod         string `json:"pod"`
	IP          string `json:"ip"`
	HostNetwork bool   `json:"hostNetwork,omitempty"`
	GatewayNode bool   `json:"gatewayNode,omitempty"` // the node of the cluster's active gateway of the peering
}

// pairResult is every check of one source to one target.
type pairResult struct {
	From endpointRef `json:"from"`
	To   endpointRef `json:"to"`
	// Address is the target as the source dials it: the far pod's IP as the source's cluster
	// sees it.
	Address string `json:"address"`
	// Family is the family of the check, IPv4 or IPv6: a dual-stack peering is checked over
	// both.
	Family string `json:"family"`
	// WantSource is the source address the far side must see: the source pod's IP as the far
	// cluster sees it, or (host network) the far cluster's view of the source's external CIDR.
	WantSource string        `json:"wantSource"`
	TCP        *probe.Result `json:"tcp"`
	UDP        *probe.Result `json:"udp"`
	ICMP       *probe.Result `json:"icmp"`
	PMTU       *probe.Result `json:"pathMTU"`
	Route      *probe.Route  `json:"route,omitempty"`
	OK         bool          `json:"ok"`
	Failures   []string      `json:"failures,omitempty"`
	// Warnings are what passed in a way worth saying: a path narrower than the tunnel MTU
	// that the gateways found and fit (traffic flows), with the fix.
	Warnings []string `json:"warnings,omitempty"`
}

// netReport is skeinctl test network's result.
type netReport struct {
	Local     clusterRef   `json:"local"`
	Remote    clusterRef   `json:"remote"`
	MTU       int          `json:"mtu"`
	Namespace string       `json:"namespace"`
	Pairs     []pairResult `json:"pairs"`
	Passed    int          `json:"passed"` // checks (a pair has four: TCP, UDP, ICMP, path MTU)
	Failed    int          `json:"failed"`
	Problems  []finding    `json:"problems,omitempty"`
	OK        bool         `json:"ok"`
	Duration  string       `json:"duration"`
}

type clusterRef struct {
	ID string `json:"id"`
	// PeerPodsSeenAs and PeerExternalSeenAs are how this cluster sees the other's CIDRs.
	PeerPodsSeenAs     []string `json:"peerPodsSeenAs,omitempty"`
	PeerExternalSeenAs string   `json:"peerExternalSeenAs,omitempty"`
	ProbeImage         string   `json:"probeImage"`
}

// progress prints what the command is doing on standard error, on one rewritten line when
// it is a terminal.
type progress struct {
	w    io.Writer
	tty  bool
	mu   sync.Mutex
	last int
}

func newProgress(w io.Writer) *progress {
	p := &progress{w: w}
	if f, ok := w.(*os.File); ok {
		p.tty = term.IsTerminal(int(f.Fd()))
	}
	return p
}

// step prints a line that stays.
func (p *progress) step(format string, a ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.clear()
	fmt.Fprintf(p.w, "INFO   "+format+"\n", a...)
}

// status rewrites the progress line (a terminal only; elsewhere it prints nothing, the steps
// say enough).
func (p *progress) status(format string, a ...any) {
	if !p.tty {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.clear()
	s := fmt.Sprintf("       "+format, a...)
	fmt.Fprint(p.w, s)
	p.last = len(s)
}

func (p *progress) clear() {
	if p.tty && p.last > 0 {
		fmt.Fprintf(p.w, "\r%s\r", strings.Repeat(" ", p.last))
		p.last = 0
	}
}

func (p *progress) done() { p.mu.Lock(); p.clear(); p.mu.Unlock() }

// testNetwork runs the whole test. It returns the report whenever it got as far as checking,
// and an error when it could not check at all.
func (g *globals) testNetwork(ctx context.Context, o *testNetOpts) (*netReport, error) {
	start := time.Now()
	pr := newProgress(g.err)
	defer pr.done()
	quiet := *g
	quiet.out = g.err // the INFO lines of sides() are progress here
	setup, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	l, r, err := quiet.sides(setup, &o.networkOpts)
	if err != nil {
		return nil, err
	}
	if o.wait {
		pr.step("Waiting up to %s for the peering to be Connected on both sides", g.timeout)
		if err := waitFor(setup, func() (bool, error) {
			for _, s := range []*side{l, r} {
				if !peeringConnected(setup, s) {
					pr.status("(%s) not Connected yet", s.label)
					return false, nil
				}
			}
			return true, nil
		}); err != nil {
			return nil, fmt.Errorf("the peering is not Connected on both sides after %s: %w (skeinctl diagnose says why)", g.timeout, err)
		}
	}
	rep := &netReport{Local: clusterRef{ID: l.id}, Remote: clusterRef{ID: r.id}, MTU: o.mtu}
	views := map[*side]view{}
	for _, s := range []*side{l, r} {
		if views[s], err = peerView(setup, s); err != nil {
			return nil, fmt.Errorf("(%s) %w", s.label, err)
		}
		ref := &rep.Local
		if s == r {
			ref = &rep.Remote
		}
		for _, m := range views[s].pods {
			ref.PeerPodsSeenAs = append(ref.PeerPodsSeenAs, m.seen.String())
		}
		if views[s].seen {
			ref.PeerExternalSeenAs = views[s].external.seen.String()
		}
	}
	if rep.MTU == 0 {
		rep.MTU = tunnelMTU(setup, l)
	}

	run := newRunID()
	runs := map[*side]*probeRun{}
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
		runs[s] = &probeRun{label: s.label, c: s.c, cfg: cfg, ns: probeNSPrefix + run, host: o.hostNetwork,
			image: probeImage(setup, s.c, s.liqo, o.image), keepUntil: time.Hour}
	}
	rep.Local.ProbeImage, rep.Remote.ProbeImage = runs[l].image, runs[r].image
	rep.Namespace = probeNSPrefix + run
	// From here on, whatever happens (an error, Ctrl-C), the namespaces go.
	defer func() {
		if o.keep {
			pr.step("Keeping namespace %s in both clusters (--keep): kubectl delete namespace %s, in each cluster, removes it", rep.Namespace, rep.Namespace)
			return
		}
		pr.step("Removing namespace %s in both clusters", rep.Namespace)
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
	pr.step("Deployed skein-probe (%s) on every node of both clusters, namespace %s", runs[l].image, rep.Namespace)

	// Wait for the probes; go on with those that are ready when the time is up.
	ready := map[*side][]probePod{}
	wait, cancelWait := context.WithTimeout(ctx, g.timeout)
	defer cancelWait()
	_ = waitFor(wait, func() (bool, error) {
		all := true
		var parts []string
		for _, s := range []*side{l, r} {
			pods, want, err := runs[s].ready(wait)
			if err != nil {
				return false, nil
			}
			ready[s] = pods
			all = all && want > 0 && len(pods) == want
			parts = append(parts, fmt.Sprintf("%s %d/%d", s.label, len(pods), want))
		}
		pr.status("probe pods ready: %s", strings.Join(parts, ", "))
		return all, nil
	})
	if ctx.Err() != nil {
		return nil, fmt.Errorf("interrupted: %w", context.Cause(ctx))
	}
	for _, s := range []*side{l, r} {
		for _, why := range runs[s].notReady(ctx) {
			rep.Problems = append(rep.Problems, finding{Level: levelProblem, Check: "probe", Subject: s.label + " " + why,
				Detail: "this probe pod did not become ready within --timeout; its node is not checked",
				Hint:   fmt.Sprintf("kubectl -n %s describe pods (with --keep); a private registry needs --probe-image", rep.Namespace)})
		}
		if servers(ready[s]) == 0 {
			rep.Duration = time.Since(start).Round(time.Millisecond).String()
			return rep, fmt.Errorf("(%s) no probe pod became ready within %s: %s", s.label, g.timeout, strings.Join(runs[s].notReady(ctx), "; "))
		}
	}
	pr.step("Probe pods ready: local %d, remote %d; checking TCP, UDP, ICMP and the path MTU (%d) both ways, %s", len(ready[l]), len(ready[r]), rep.MTU, views[l].families())

	gwNodes := map[*side]string{l: activeGatewayNode(ctx, l), r: activeGatewayNode(ctx, r)}
	// One exec per source: skein-probe check against every target of the other cluster.
	type job struct {
		s, d    *side
		src     probePod
		targets []probePod
		addrs   []string
		ipv6    bool // the family of the targets' addresses
	}
	var jobs []job
	for _, dir := range [][2]*side{{l, r}, {r, l}} {
		s, d := dir[0], dir[1]
		// Each family the peer published a pod CIDR of: IPv4 (the one family of a peering
		// without a Configuration yet, which then fails whole, saying so), IPv6 for
		// dual-stack and IPv6-only peers.
		for _, ipv6 := range []bool{false, true} {
			if views[s].configured && views[s].seen && !views[s].hasFamily(ipv6) || !views[s].seen && ipv6 {
				continue
			}
			// Without a mapped Configuration every pair fails whole (saying so), whatever
			// address the pods have.
			addrOf := func(p probePod) string {
				if !views[s].seen {
					return cmpOr(p.IP, p.IP6)
				}
				return p.addr(ipv6)
			}
			var targets []probePod
			var addrs []string
			for _, dst := range ready[d] {
				if dst.Host || addrOf(dst) == "" {
					continue
				}
				targets = append(targets, dst)
				addr := "" // not in the pod CIDRs the peer published, or no Configuration
				if a := views[s].of(netip.MustParseAddr(addrOf(dst))); a.IsValid() {
					addr = a.String()
				}
				addrs = append(addrs, addr)
			}
			if len(targets) == 0 {
				continue
			}
			for _, src := range ready[s] {
				// A pod calls from its address of the family; a host-network process from
				// whichever address its node picks (its external one is what matters).
				if !src.Host && addrOf(src) == "" {
					continue
				}
				jobs = append(jobs, job{s: s, d: d, src: src, targets: targets, addrs: addrs, ipv6: ipv6})
			}
		}
	}
	if len(jobs) == 0 {
		rep.Duration = time.Since(start).Round(time.Millisecond).String()
		return rep, fmt.Errorf("no probe pod has an address of a family the other cluster published a pod CIDR of (local pods %s, remote pods %s; each side maps the other's %s and %s): an IPv4-only and an IPv6-only cluster cannot reach each other's pods",
			families(ready[l]), families(ready[r]), views[l].families(), views[r].families())
	}
	var mu sync.Mutex
	var done int
	sem := make(chan struct{}, 4)
	var wg sync.WaitGroup
	results := make([][]pairResult, len(jobs))
	for i, j := range jobs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			var dial []string
			for _, a := range j.addrs {
				if a != "" {
					dial = append(dial, a)
				}
			}
			args := []string{"check", "--timeout", o.checkTimeout.String(), "--mtu", fmt.Sprint(rep.MTU)}
			if j.src.Host {
				args = append(args, "--route")
			}
			var cells map[string]probe.Cell
			var execErr error
			if len(dial) > 0 {
				// Four checks per target, each at most --check-timeout (the path MTU two).
				budget := time.Duration(len(dial)/4+1)*6*o.checkTimeout + 30*time.Second
				ectx, cancel := context.WithTimeout(ctx, budget)
				out, err := runs[j.s].exec(ectx, j.src.Name, append(args, dial...)...)
				cancel()
				var pr probe.Report
				switch {
				case err != nil:
					execErr = err
				case json.Unmarshal(out, &pr) != nil:
					execErr = fmt.Errorf("skein-probe check in %s printed no report (is %s a skein-probe image of this version?)", j.src.Name, runs[j.s].image)
				default:
					cells = map[string]probe.Cell{}
					for _, c := range pr.Cells {
						cells[c.Target] = c
					}
				}
			}
			var out []pairResult
			for k, dst := range j.targets {
				from := cmpOr(j.src.addr(j.ipv6), cmpOr(j.src.IP, j.src.IP6)) // a host-network source: its node's address
				p := pairResult{
					From:    endpointRef{Cluster: j.s.label, Node: j.src.Node, Pod: j.src.Name, IP: from, HostNetwork: j.src.Host, GatewayNode: j.src.Node == gwNodes[j.s]},
					To:      endpointRef{Cluster: j.d.label, Node: dst.Node, Pod: dst.Name, IP: dst.addr(j.ipv6), GatewayNode: dst.Node == gwNodes[j.d]},
					Address: j.addrs[k],
					Family:  map[bool]string{false: "IPv4", true: "IPv6"}[j.ipv6],
				}
				evaluate(&p, views[j.s], views[j.d], cells, execErr, rep.MTU)
				out = append(out, p)
			}
			results[i] = out
			mu.Lock()
			done++
			pr.status("checked %d of %d sources", done, len(jobs))
			mu.Unlock()
		}()
	}
	wg.Wait()
	if ctx.Err() != nil {
		return nil, fmt.Errorf("interrupted: %w", context.Cause(ctx))
	}
	for _, res := range results {
		rep.Pairs = append(rep.Pairs, res...)
	}
	for _, p := range rep.Pairs {
		n := 4 - len(p.Failures)
		if n < 0 {
			n = 0
		}
		rep.Passed += n
		rep.Failed += len(p.Failures)
	}
	if rep.Failed > 0 {
		diag, cancel := context.WithTimeout(ctx, g.timeout)
		rep.Problems = append(rep.Problems, g.explain(diag, l, r, rep)...)
		cancel()
	}
	rep.OK = rep.Failed == 0 && len(rep.Problems) == 0
	rep.Duration = time.Since(start).Round(time.Millisecond).String()
	return rep, nil
}

// families says which families the pods (not on the host network) have addresses of.
func families(pods []probePod) string {
	var v4, v6 bool
	for _, p := range pods {
		v4, v6 = v4 || !p.Host && p.IP != "", v6 || !p.Host && p.IP6 != ""
	}
	return familyWords(v4, v6)
}

// families says which families of the peer's pod CIDRs v maps.
func (v view) families() string { return familyWords(v.hasFamily(false), v.hasFamily(true)) }

func familyWords(v4, v6 bool) string {
	switch {
	case v4 && v6:
		return "IPv4 and IPv6"
	case v4:
		return "IPv4"
	case v6:
		return "IPv6"
	}
	return "none"
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func servers(pods []probePod) int {
	n := 0
	for _, p := range pods {
		if !p.Host {
			n++
		}
	}
	return n
}

// evaluate fills a pair's verdict from the check results: each of TCP, UDP, ICMP and the path
// MTU passes or adds a failure. A path narrower than the tunnel MTU (mtu) is named as such: a
// warning when the path answers with its MTU (the gateways lowered the tunnel to fit it;
// traffic flows), a failure naming the path MTU when packets of the tunnel MTU vanish while
// small ones pass (a path MTU black hole).
func evaluate(p *pairResult, srcView, dstView view, cells map[string]probe.Cell, execErr error, mtu int) {
	src := netip.MustParseAddr(p.From.IP)
	var wantIn netip.Prefix
	switch {
	case !dstView.configured:
		p.WantSource = ""
	case p.From.HostNetwork:
		wantIn = dstView.externalOf(p.Family == "IPv6").seen
		p.WantSource = wantIn.String()
	default:
		if a := dstView.of(src); a.IsValid() {
			p.WantSource = a.String()
		}
	}
	fail := func(check, why string) { p.Failures = append(p.Failures, check+": "+why) }
	failAll := func(why string) {
		for _, c := range []string{"tcp", "udp", "icmp", "path-mtu"} {
			fail(c, why)
		}
	}
	switch {
	case p.From.HostNetwork && dstView.seen && !wantIn.IsValid():
		failAll(fmt.Sprintf("the %s cluster has no %s external CIDR of the %s cluster, so %s host-network traffic has no address to leave with (connect again after upgrading skein there)", p.To.Cluster, p.Family, p.From.Cluster, p.Family))
		p.WantSource = ""
		return
	case !srcView.configured:
		failAll(fmt.Sprintf("the %s cluster has no Configuration of the %s cluster, so it has no route to its pods", p.From.Cluster, p.To.Cluster))
		return
	case !srcView.seen:
		failAll(fmt.Sprintf("the %s cluster's Configuration of the %s cluster is not mapped yet (no status.remote)", p.From.Cluster, p.To.Cluster))
		return
	case p.Address == "":
		failAll(fmt.Sprintf("pod IP %s is outside the pod CIDRs the %s cluster published", p.To.IP, p.To.Cluster))
		return
	case execErr != nil:
		failAll(execErr.Error())
		return
	}
	c, ok := cells[p.Address]
	if !ok {
		failAll("skein-probe check reported nothing for " + p.Address)
		return
	}
	p.TCP, p.UDP, p.ICMP, p.PMTU, p.Route = c.TCP, c.UDP, c.ICMP, c.PMTU, c.Route
	for _, x := range []struct {
		name string
		r    *probe.Result
	}{{"tcp", c.TCP}, {"udp", c.UDP}} {
		switch {
		case x.r == nil:
			fail(x.name, "not checked")
		case !x.r.OK:
			fail(x.name, x.r.Error)
		case p.WantSource == "":
			fail(x.name, fmt.Sprintf("the far side saw %s, but the %s cluster has no Configuration of the %s cluster to say what it should see", x.r.Seen, p.To.Cluster, p.From.Cluster))
		default:
			seen, err := netip.ParseAddr(x.r.Seen)
			good := err == nil && (p.From.HostNetwork && wantIn.Contains(seen) || !p.From.HostNetwork && seen.String() == p.WantSource)
			if !good {
				why := fmt.Sprintf("the far side saw the call come from %s, want %s", x.r.Seen, p.WantSource)
				if x.r.Seen == p.From.IP {
					why += " (the source was not remapped)"
				}
				fail(x.name, why)
			}
		}
	}
	for _, x := range []struct {
		name string
		r    *probe.Result
	}{{"icmp", c.ICMP}, {"path-mtu", c.PMTU}} {
		switch {
		case x.r == nil:
			fail(x.name, "not checked")
		case x.r.OK:
		case x.name == "path-mtu" && x.r.PathMTU > 0 && x.r.PathMTU < mtu:
			p.Warnings = append(p.Warnings, "path-mtu: "+narrowPath(x.r.PathMTU, mtu))
		case x.name == "path-mtu" && c.UDP != nil && c.UDP.OK && strings.Contains(x.r.Error, "got no answer"):
			fail(x.name, x.r.Error+": small packets pass but packets of the tunnel MTU are lost: the path between the clusters is narrower than the tunnel's packets and drops ICMP (a path MTU black hole)"+
				"; the gateways find its MTU within seconds (skeinctl diagnose shows their tunnel MTU); if it stays, connect with --mtu set to the path MTU minus 60 (80 over IPv6)")
		default:
			fail(x.name, x.r.Error)
		}
	}
	p.OK = len(p.Failures) == 0
}

// narrowPath says that the path carries only pathMTU of the tunnel's mtu, and the fix.
func narrowPath(pathMTU, mtu int) string {
	return fmt.Sprintf("the WAN's path MTU forces the tunnel down from %d to %d: traffic flows; to avoid the search after every reconnect set --mtu %d on connect (skeinctl network connect ... --mtu %d)",
		mtu, pathMTU, pathMTU, pathMTU)
}

// pathMTUOnly says whether a pair failed the path-MTU check and nothing else: no node is to
// blame for the path between the clusters.
func pathMTUOnly(p pairResult) bool {
	for _, f := range p.Failures {
		if !strings.HasPrefix(f, "path-mtu:") {
			return false
		}
	}
	return len(p.Failures) > 0
}

// peeringConnected says whether s has a gateway of the peering whose Connection is Connected.
func peeringConnected(ctx context.Context, s *side) bool {
	var conns netv1alpha1.ConnectionList
	if err := s.c.List(ctx, &conns, client.MatchingLabels{netv1alpha1.RemoteClusterIDLabel: s.peer.id}); err != nil {
		return false
	}
	for _, c := range conns.Items {
		if c.Status.Value == netv1alpha1.Connected {
			return true
		}
	}
	return false
}

// activeGatewayNode is the node of s's active gateway pod of the peering ("" if none).
func activeGatewayNode(ctx context.Context, s *side) string {
	var pods corev1.PodList
	if err := s.c.List(ctx, &pods, client.MatchingLabels{"networking.liqo.io/component": "gateway", "networking.liqo.io/active": "true"}); err != nil {
		return ""
	}
	gws := peeringGateways(ctx, s)
	for _, p := range pods.Items {
		if gws[p.Namespace+"/"+p.Labels["networking.liqo.io/gateway"]] {
			return p.Spec.NodeName
		}
	}
	return ""
}

// peeringGateways are s's GatewayServers and GatewayClients of the peering, as namespace/name.
func peeringGateways(ctx context.Context, s *side) map[string]bool {
	out := map[string]bool{}
	sel := client.MatchingLabels{netv1alpha1.RemoteClusterIDLabel: s.peer.id}
	var servers netv1alpha1.GatewayServerList
	if s.c.List(ctx, &servers, sel) == nil {
		for _, g := range servers.Items {
			out[g.Namespace+"/"+g.Name] = true
		}
	}
	var clients netv1alpha1.GatewayClientList
	if s.c.List(ctx, &clients, sel) == nil {
		for _, g := range clients.Items {
			out[g.Namespace+"/"+g.Name] = true
		}
	}
	return out
}

// explain looks for the layer that broke: each cluster's components and its objects of this
// peering (as skeinctl diagnose checks them), then the nodes whose every check failed, their
// agent and where their kernel routes the peer.
func (g *globals) explain(ctx context.Context, l, r *side, rep *netReport) []finding {
	var out []finding
	for _, s := range []*side{l, r} {
		rp := &report{}
		checkComponents(ctx, rp, s.c, s.liqo)
		if ps := readPeerings(ctx, rp, s.c); ps != nil {
			mine := ps.of(s.peer.id)
			if len(mine.confs.Items) == 0 {
				rp.problem("configuration", "", fmt.Sprintf("no Configuration of cluster %s: this cluster does not know the peer's CIDRs, so nothing routes to it and its gateway does not accept its traffic", s.peer.id),
					"skeinctl network init (or connect) with both kubeconfigs")
			}
			if len(mine.servers.Items)+len(mine.clients.Items) == 0 {
				rp.problem("gateway", "", fmt.Sprintf("no GatewayServer or GatewayClient for cluster %s: there is no tunnel", s.peer.id), "skeinctl network connect")
			}
			checkPeerings(rp, mine)
		}
		for _, f := range rp.findings {
			if f.Level == levelProblem {
				f.Subject = strings.TrimSpace("(" + s.label + ") " + f.Subject)
				out = append(out, f)
			}
		}
	}
	// Nodes: every pair through the node failed while pairs elsewhere passed.
	type tally struct{ ok, bad int }
	nodes := map[[2]string]*tally{}
	count := func(cluster, node string, ok bool) {
		k := [2]string{cluster, node}
		if nodes[k] == nil {
			nodes[k] = &tally{}
		}
		if ok {
			nodes[k].ok++
		} else {
			nodes[k].bad++
		}
	}
	anyOK := false
	pathOnly := 0
	for _, p := range rep.Pairs {
		if pathMTUOnly(p) {
			pathOnly++
			continue
		}
		count(p.From.Cluster, p.From.Node, p.OK)
		count(p.To.Cluster, p.To.Node, p.OK)
		anyOK = anyOK || p.OK
	}
	keys := make([][2]string, 0, len(nodes))
	for k := range nodes {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i][0]+"/"+keys[i][1] < keys[j][0]+"/"+keys[j][1] })
	for _, k := range keys {
		t := nodes[k]
		s := l
		if k[0] == r.label {
			s = r
		}
		if t.bad > 0 && t.ok == 0 && anyOK {
			f := finding{Level: levelProblem, Check: "node", Subject: fmt.Sprintf("(%s) %s", k[0], k[1]),
				Detail: fmt.Sprintf("all %d pairs from or to this node failed, while pairs through other nodes passed", t.bad)}
			if why := agentOn(ctx, s, k[1]); why != "" {
				f.Detail += "; " + why
			}
			f.Hint = fmt.Sprintf("skeinctl diagnose --node on %s (as root: kubectl debug node/%s --profile=sysadmin)", k[1], k[1])
			out = append(out, f)
		}
	}
	if pathOnly > 0 {
		out = append(out, finding{Level: levelProblem, Check: "path MTU",
			Detail: fmt.Sprintf("%d pair(s) failed only the path-MTU check: packets of the tunnel MTU %d do not cross the path between the clusters while smaller ones do; no node is to blame", pathOnly, rep.MTU),
			Hint:   "skeinctl diagnose in both clusters shows the gateways' tunnel MTU; connect with --mtu set to the path MTU minus 60 (80 over IPv6): docs/troubleshooting.md, \"A WAN narrower than the tunnel's packets\""})
	}
	// Where the nodes route the peer (the host-network probes looked).
	seen := map[string]bool{}
	for _, p := range rep.Pairs {
		if p.Route == nil || !p.From.HostNetwork {
			continue
		}
		key := p.From.Cluster + "/" + p.From.Node
		if seen[key] {
			continue
		}
		switch {
		case p.Route.Error != "":
			seen[key] = true
			out = append(out, finding{Level: levelProblem, Check: "route", Subject: fmt.Sprintf("(%s) %s", p.From.Cluster, p.From.Node),
				Detail: fmt.Sprintf("no route to %s: %s", p.Address, p.Route.Error)})
		case p.Route.Device != netv1alpha1.DefaultOverlayDevice:
			seen[key] = true
			out = append(out, finding{Level: levelProblem, Check: "route", Subject: fmt.Sprintf("(%s) %s", p.From.Cluster, p.From.Node),
				Detail: fmt.Sprintf("a packet to %s leaves through %s (table %s), not %s: the node's route in table %d (or its rule) is missing",
					p.Address, p.Route.Device, p.Route.Table, netv1alpha1.DefaultOverlayDevice, netv1alpha1.RouteTable),
				Hint: "skein-agent puts it back within its resync (10 s) when it runs; skeinctl diagnose --node on that node shows the rules"})
		}
	}
	if len(out) == 0 {
		out = append(out, finding{Level: levelProblem, Check: "fabric", Detail: "checks failed but skein's objects, components and the nodes' routes look right",
			Hint: "the failures above say which checks; skeinctl diagnose in both clusters, and docs/troubleshooting.md"})
	}
	return out
}

// agentOn says what is wrong with skein-agent on node ("" when it runs and is ready).
func agentOn(ctx context.Context, s *side, node string) string {
	var pods corev1.PodList
	if err := s.c.List(ctx, &pods, client.InNamespace(s.liqo), componentLabels("agent")); err != nil {
		return ""
	}
	for _, p := range pods.Items {
		if p.Spec.NodeName != node || p.DeletionTimestamp != nil {
			continue
		}
		if podReady(&p) {
			return ""
		}
		return fmt.Sprintf("skein-agent pod %s on it is not ready (%s)", p.Name, p.Status.Phase)
	}
	return "skein-agent does not run on it (no pod of its DaemonSet there), so nothing repairs its routes"
}

// of keeps the objects of the peering with cluster id.
func (s *peerings) of(id string) *peerings {
	out := &peerings{}
	nss := map[string]bool{}
	for _, c := range s.confs.Items {
		if c.Labels[netv1alpha1.RemoteClusterIDLabel] == id {
			out.confs.Items = append(out.confs.Items, c)
			nss[c.Namespace] = true
		}
	}
	for _, g := range s.servers.Items {
		if g.Labels[netv1alpha1.RemoteClusterIDLabel] == id {
			out.servers.Items = append(out.servers.Items, g)
			nss[g.Namespace] = true
		}
	}
	for _, g := range s.clients.Items {
		if g.Labels[netv1alpha1.RemoteClusterIDLabel] == id {
			out.clients.Items = append(out.clients.Items, g)
			nss[g.Namespace] = true
		}
	}
	for _, c := range s.conns.Items {
		if nss[c.Namespace] {
			out.conns.Items = append(out.conns.Items, c)
		}
	}
	for _, p := range s.pods.Items {
		if nss[p.Namespace] {
			out.pods.Items = append(out.pods.Items, p)
		}
	}
	return out
}

func podReady(p *corev1.Pod) bool {
	c := podCondition(p, corev1.PodReady)
	return c != nil && c.Status == corev1.ConditionTrue && p.Status.Phase == corev1.PodRunning
}

func podCondition(p *corev1.Pod, t corev1.PodConditionType) *corev1.PodCondition {
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == t {
			return &p.Status.Conditions[i]
		}
	}
	return nil
}

// print writes the report as a table, the failures, the problems found and a summary.
func (rep *netReport) print(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "FROM\tTO\tSEEN AS\tTCP\tUDP\tICMP\tPATH-MTU\tLATENCY")
	mark := func(r *probe.Result, failures []string, name string) string {
		for _, f := range failures {
			if strings.HasPrefix(f, name+":") {
				return "FAIL"
			}
		}
		if r == nil {
			return "-"
		}
		if r.PathMTU > 0 {
			return "narrow"
		}
		return "ok"
	}
	for _, p := range rep.Pairs {
		from := fmt.Sprintf("%s/%s", p.From.Cluster, p.From.Node)
		if p.From.HostNetwork {
			from += " host"
		} else {
			from += " " + p.From.IP
		}
		if p.From.GatewayNode {
			from += " (gw node)"
		}
		to := fmt.Sprintf("%s/%s %s", p.To.Cluster, p.To.Node, cmpOr(p.Address, "?"))
		if p.To.GatewayNode {
			to += " (gw node)"
		}
		lat := "-"
		switch {
		case p.ICMP != nil && p.ICMP.OK:
			lat = fmt.Sprintf("%.2f ms", float64(p.ICMP.RTTMicros)/1000)
		case p.TCP != nil && p.TCP.OK:
			lat = fmt.Sprintf("%.2f ms (tcp)", float64(p.TCP.RTTMicros)/1000)
		}
		seen := "-"
		if p.TCP != nil && p.TCP.Seen != "" {
			seen = p.TCP.Seen
		}
		// Node names, addresses and what the far probe says it saw come from the clusters
		// and the probes, which a peer controls: escaped before they reach a terminal.
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", printable(from), printable(to), printable(seen), mark(p.TCP, p.Failures, "tcp"), mark(p.UDP, p.Failures, "udp"),
			mark(p.ICMP, p.Failures, "icmp"), mark(p.PMTU, p.Failures, "path-mtu"), lat)
	}
	tw.Flush()
	// One line per failed pair; -o json has every detail.
	const maxLines = 30
	lines := 0
	for _, p := range rep.Pairs {
		if len(p.Failures) == 0 {
			continue
		}
		if lines == 0 {
			fmt.Fprintln(w, "\nFailures:")
		}
		lines++
		if lines > maxLines {
			continue
		}
		from := p.From.Cluster + "/" + p.From.Node
		if p.From.HostNetwork {
			from += " (host)"
		}
		fmt.Fprintf(w, "  %s: %s\n", printable(fmt.Sprintf("%s -> %s/%s %s", from, p.To.Cluster, p.To.Node, cmpOr(p.Address, "?"))), printable(joinFailures(p.Failures)))
	}
	if lines > maxLines {
		fmt.Fprintf(w, "  ... and %d more pairs (-o json lists them all)\n", lines-maxLines)
	}
	// Warnings, each said once: a narrow path is the same for every pair.
	var warned []string
	for _, p := range rep.Pairs {
		for _, x := range p.Warnings {
			if !slices.Contains(warned, x) {
				warned = append(warned, x)
			}
		}
	}
	if len(warned) > 0 {
		fmt.Fprintln(w, "\nWarnings:")
		for _, x := range warned {
			fmt.Fprintf(w, "  %s\n", printable(x))
		}
	}
	if len(rep.Problems) > 0 {
		fmt.Fprintln(w, "\nWhat is wrong:")
		r := &report{findings: rep.Problems}
		for _, f := range r.findings {
			subject := f.Check
			if f.Subject != "" {
				subject += " " + f.Subject
			}
			fmt.Fprintf(w, "  PROBLEM %s: %s\n", printable(subject), printable(f.Detail))
			if f.Hint != "" {
				fmt.Fprintf(w, "          -> %s\n", printable(f.Hint))
			}
		}
	}
	verdict := "PASS"
	if !rep.OK {
		verdict = "FAIL"
	}
	fmt.Fprintf(w, "\n%s: %d pairs, %d checks passed, %d failed (tunnel MTU %d; checked in %s)\n", verdict, len(rep.Pairs), rep.Passed, rep.Failed, rep.MTU, rep.Duration)
}

// joinFailures writes a pair's failures on one line, a reason shared by several checks once:
// "tcp, udp: timed out; icmp: no echo reply".
func joinFailures(fs []string) string {
	var order []string
	checks := map[string][]string{}
	for _, f := range fs {
		check, why, _ := strings.Cut(f, ": ")
		if _, ok := checks[why]; !ok {
			order = append(order, why)
		}
		checks[why] = append(checks[why], check)
	}
	parts := make([]string, len(order))
	for i, why := range order {
		parts[i] = strings.Join(checks[why], ", ") + ": " + why
	}
	return strings.Join(parts, "; ")
}
