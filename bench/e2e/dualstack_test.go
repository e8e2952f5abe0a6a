package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/skein-net/skein/bench/lab"
	netv1alpha1 "github.com/skein-net/skein/control/api/networking/v1alpha1"
)

// TestE2EDualStack peers two dual-stack clusters (lab.Options.DualStack) that overlap in both
// families: pods of each get an IPv4 address from 10.244.0.0/16 and an IPv6 one from
// fd00:244::/56, in both clusters. skein is installed with the chart given both pod CIDRs (and
// both service CIDRs); skeinctl network connect publishes both, so each cluster's controller
// must remap the peer's IPv6 pod CIDR into its IPv6 pool (fd00::/8) beside the IPv4 one. Then
// pods reach the peer's pods over IPv6 through the remapped CIDR (TCP, UDP, ICMPv6; the far
// side sees the caller as remapped on its side, which only the gateways' prefix translation
// makes), over the node agents' IPv6 routes in table 18952, and IPv4 still works (the usual
// matrix).
func TestE2EDualStack(t *testing.T) {
	e := setupLab(t, false, lab.Options{DualStack: true})
	var services []string
	for _, s := range e.l.ServiceCIDRs {
		services = append(services, s.String())
	}
	e.installSets = []string{"ipam.serviceCIDR={" + strings.Join(services, ",") + "}"}
	defer func() { fmt.Printf("\n=== skein end-to-end report (dual stack)\n%s\n", e.report.String()) }()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if !t.Run("install", func(t *testing.T) { e.t = t; e.install(ctx, 1) }) {
		return
	}
	e.probes(ctx)
	if !t.Run("dual-stack-pods", func(t *testing.T) { e.t = t; e.dualStackPods(ctx) }) {
		return
	}
	if !t.Run("connect", func(t *testing.T) { e.t = t; e.connect(ctx) }) {
		return
	}
	if !t.Run("both-families-mapped", func(t *testing.T) { e.t = t; e.bothFamiliesMapped(ctx) }) {
		return
	}
	t.Run("ipv6-routes", func(t *testing.T) { e.t = t; e.ipv6Routes(ctx) })
	t.Run("ipv6-matrix", func(t *testing.T) { e.t = t; e.matrix6(ctx) })
	t.Run("ipv6-host-network", func(t *testing.T) { e.t = t; e.hostNetwork6(ctx) })
	t.Run("network-status", func(t *testing.T) { e.t = t; e.dualStackStatus(ctx) })
	// 2 pod and 2 host probes per cluster, each to the other's 2 pod probes, both ways, per family.
	t.Run("test-network", func(t *testing.T) { e.t = t; e.testNetworkFamilies(ctx, map[string]int{"IPv4": 16, "IPv6": 16}) })
	t.Run("matrix", func(t *testing.T) { e.t = t; e.matrix(ctx) })
}

// podIP6 is a pod's IPv6 address (from status.podIPs), or the invalid address.
func podIP6(p corev1.Pod) netip.Addr {
	for _, ip := range p.Status.PodIPs {
		if a, err := netip.ParseAddr(ip.IP); err == nil && a.Is6() {
			return a
		}
	}
	return netip.Addr{}
}

// dualStackPods: the lab's premise holds (every probe pod has an IPv4 address in lab.PodCIDR
// and an IPv6 one in lab.PodCIDR6, in both clusters), or the test proves nothing.
func (e *env) dualStackPods(ctx context.Context) {
	for i := range 2 {
		for _, p := range e.probePods(ctx, i) {
			v4, v6 := netip.MustParseAddr(p.Status.PodIP), podIP6(p)
			if !lab.PodCIDR.Contains(v4) || !lab.PodCIDR6.Contains(v6) {
				e.t.Errorf("cluster %d: pod %s has addresses %v, want one in %v and one in %v", i, p.Name, p.Status.PodIPs, lab.PodCIDR, lab.PodCIDR6)
				continue
			}
			e.reportf("dual stack: cluster %d pod %s on %s: %s and %s", i, p.Name, p.Spec.NodeName, v4, v6)
		}
	}
}

// bothFamiliesMapped: each cluster's Configuration publishes the peer's two pod CIDRs
// (10.244.0.0/16 and fd00:244::/56) and maps both, each into a prefix of its own family and
// length that is not the peer's own (both clash with the local pod CIDRs): the IPv6 one inside
// the IPv6 pool fd00::/8.
func (e *env) bothFamiliesMapped(ctx context.Context) {
	pool6 := netip.MustParsePrefix("fd00::/8")
	for i := range 2 {
		pods, external := e.peerView(ctx, i)
		if len(pods) != 2 {
			e.t.Fatalf("cluster %d sees %d pod CIDRs of its peer, want 2 (IPv4 and IPv6): %v", i, len(pods), pods)
		}
		for _, m := range pods {
			want := lab.PodCIDR
			if m.real.Addr().Is6() {
				want = lab.PodCIDR6
			}
			switch {
			case m.real != want:
				e.t.Errorf("cluster %d: the peer publishes pod CIDR %v, want %v", i, m.real, want)
			case m.seen.Addr().Is4() != m.real.Addr().Is4() || m.seen.Bits() != m.real.Bits():
				e.t.Errorf("cluster %d: the peer's %v seen as %v: another family or length", i, m.real, m.seen)
			case m.seen.Overlaps(lab.PodCIDR) || m.seen.Overlaps(lab.PodCIDR6):
				e.t.Errorf("cluster %d: the peer's %v seen as %v, which clashes with the local pod CIDRs", i, m.real, m.seen)
			case m.real.Addr().Is6() && !pool6.Contains(m.seen.Addr()):
				e.t.Errorf("cluster %d: the peer's %v seen as %v, outside the IPv6 pool %v", i, m.real, m.seen, pool6)
			}
		}
		cf, ready := e.readyConfiguration(ctx, i)
		e.reportf("dual stack: cluster %d Configuration %s (%s): spec.remote.cidr pod %s, additionalPods %v; status.remote.cidr pod %s, additionalPods %v, external %v",
			i, cf.Name, ready, cf.Spec.Remote.CIDR.Pod, cf.Spec.Remote.CIDR.AdditionalPods, cf.Status.Remote.CIDR.Pod, cf.Status.Remote.CIDR.AdditionalPods, external)
	}
}

// readyConfiguration is cluster i's one Configuration, an error when it is not Ready, and
// its Ready condition in words (for the report).
func (e *env) readyConfiguration(ctx context.Context, i int) (netv1alpha1.Configuration, string) {
	e.t.Helper()
	var confs netv1alpha1.ConfigurationList
	if err := e.c[i].List(ctx, &confs); err != nil || len(confs.Items) != 1 {
		e.t.Fatalf("cluster %d: want one Configuration: %v", i, err)
	}
	cf := confs.Items[0]
	ready := "no Ready condition"
	for _, c := range cf.Status.Conditions {
		if c.Type == netv1alpha1.ConditionReady {
			ready = fmt.Sprintf("Ready=%s %s", c.Status, c.Reason)
			if c.Status != metav1.ConditionTrue {
				e.t.Errorf("cluster %d: Configuration %s: %s: %s", i, cf.Name, ready, c.Message)
			}
		}
	}
	return cf, ready
}

// ipv6Routes: every node of both clusters routes the peer's remapped IPv6 pod CIDR into table
// 18952 (an ip -6 rule) via the gateway's IPv6 overlay address (64:ff9b:1::/96) on liqo.vxlan,
// and the device has its own IPv6 overlay address.
func (e *env) ipv6Routes(ctx context.Context) {
	for i := range 2 {
		pods, _ := e.peerView(ctx, i)
		var seen6 netip.Prefix
		for _, m := range pods {
			if m.seen.Addr().Is6() {
				seen6 = m.seen
			}
		}
		if !seen6.IsValid() {
			e.t.Fatalf("cluster %d: no IPv6 pod CIDR of the peer mapped", i)
		}
		for j, n := range e.l.Clusters[i].Nodes {
			var rules, routes, addrs string
			took := e.waitFor(ctx, time.Minute, fmt.Sprintf("c%d %s: IPv6 rule and route to %v", i, e.l.Clusters[i].NodeName(j), seen6), func() bool {
				r, _ := exec.CommandContext(ctx, "ip", "-n", n.Name, "-6", "rule", "show", "lookup", "18952").Output()
				t, _ := exec.CommandContext(ctx, "ip", "-n", n.Name, "-6", "route", "show", "table", "18952").Output()
				a, _ := exec.CommandContext(ctx, "ip", "-n", n.Name, "-6", "-o", "addr", "show", "dev", "liqo.vxlan").Output()
				rules, routes, addrs = string(r), string(t), string(a)
				return strings.Contains(rules, "to "+seen6.String()) &&
					regexp.MustCompile(regexp.QuoteMeta(seen6.String())+` via 64:ff9b:1::[0-9a-f:]+ dev liqo\.vxlan`).MatchString(routes) &&
					strings.Contains(addrs, "64:ff9b:1::")
			})
			e.reportf("ipv6 routes: c%d %s (%.1fs): rule %q; table 18952: %q; liqo.vxlan: %q", i, e.l.Clusters[i].NodeName(j), took.Seconds(),
				firstLine(rules, seen6.String()), firstLine(routes, seen6.String()), firstLine(addrs, "64:ff9b:1::"))
		}
	}
}

// external6Of is how cluster at sees cluster of's IPv6 external CIDR (its remap of the
// peer's additionalExternals entry, or external in an IPv6-only cluster), and the peer's own.
func (e *env) external6Of(ctx context.Context, at, of int) (real, seen netip.Prefix) {
	e.t.Helper()
	var confs netv1alpha1.ConfigurationList
	if err := e.c[at].List(ctx, &confs, client.MatchingLabels{netv1alpha1.RemoteClusterIDLabel: e.clusterID(ctx, of)}); err != nil || len(confs.Items) != 1 || confs.Items[0].Status.Remote == nil {
		e.t.Fatalf("cluster %d: want one mapped Configuration for cluster %d (%v)", at, of, err)
	}
	cf := confs.Items[0]
	specs, seens := cf.Spec.Remote.CIDR.All(), cf.Status.Remote.CIDR.All()
	for i := range min(len(specs), len(seens)) {
		r, err1 := netip.ParsePrefix(string(specs[i].CIDR))
		s, err2 := netip.ParsePrefix(string(seens[i].CIDR))
		if err1 != nil || err2 != nil || !r.Addr().Is6() {
			continue
		}
		if specs[i].Field == "external" || strings.HasPrefix(specs[i].Field, "additionalExternals") {
			return r, s
		}
	}
	e.t.Fatalf("cluster %d: the Configuration of cluster %d has no IPv6 external CIDR: spec %+v, status %+v", at, of, cf.Spec.Remote.CIDR, cf.Status.Remote.CIDR)
	return
}

// hostNetwork6: a process in each node's own network namespace (a hostNetwork pod) reaches a
// peer's pod over IPv6; the peer sees it from an address of the node's cluster's IPv6
// external CIDR as remapped there (the agent's ip6 SNAT to the node's externalIP6, the
// gateway routing the replies back to that node).
func (e *env) hostNetwork6(ctx context.Context) {
	var passed int
	for _, dir := range [][2]int{{0, 1}, {1, 0}} {
		s, d := dir[0], dir[1]
		real, seenAtD := e.external6Of(ctx, d, s)
		dstAs, _ := e.viewOf(ctx, s, d)
		dst := e.probePods(ctx, d)[0]
		target := dstAs.of(podIP6(dst))
		for j := range e.l.Clusters[s].Nodes {
			node := e.l.Clusters[s].NodeName(j)
			var in netv1alpha1.InternalNode
			if err := e.c[s].Get(ctx, client.ObjectKey{Name: node}, &in); err != nil || in.Spec.ExternalIP6 == nil {
				e.t.Errorf("c%d %s: no IPv6 external address in its InternalNode (%v)", s, node, err)
				continue
			}
			ext6 := netip.MustParseAddr(string(*in.Spec.ExternalIP6))
			out, err := e.probe(ctx, e.l.Clusters[s].Nodes[j].Name, "call", "--timeout", "3s", "tcp", netip.AddrPortFrom(target, 7070).String())
			line := fmt.Sprintf("ipv6 host network: c%d %s (external %s in %s) -> c%d %s as %s: tcp", s, node, ext6, real, d, dst.Name, target)
			var seen netip.Addr
			if f := strings.Fields(out); err == nil && len(f) >= 3 {
				if ap, perr := netip.ParseAddrPort(f[2]); perr == nil {
					seen = ap.Addr()
				}
			}
			switch want := remap(ext6, seenAtD); {
			case err != nil:
				e.t.Errorf("%s: %v: %s", line, err, out)
			case !real.Contains(ext6):
				e.t.Errorf("%s: the node's IPv6 external address %s is outside its cluster's IPv6 external CIDR %s", line, ext6, real)
			case seen != want:
				e.t.Errorf("%s: the far side saw %v (%q), want %s (%s as c%d sees it, %s)", line, seen, out, want, ext6, d, seenAtD)
			default:
				passed++
				e.reportf("%s ok (seen as %s)", line, seen)
				continue
			}
			e.reportf("%s FAIL", line)
		}
	}
	e.reportf("ipv6 host network: %d passed", passed)
}

// dualStackStatus: skeinctl network status shows the peer's CIDRs of both families, as
// published and as remapped here, the IPv6 external CIDR among the external ones.
func (e *env) dualStackStatus(ctx context.Context) {
	for i := range 2 {
		var rows []struct {
			RemotePodCIDR string `json:"remotePodCIDR"`
			SeenPodCIDR   string `json:"remappedPodCIDR"`
			RemoteExt     string `json:"remoteExternalCIDR"`
			SeenExt       string `json:"remappedExternalCIDR"`
		}
		out := e.run(ctx, i, "skeinctl", "network", "status", "-o", "json")
		if err := json.Unmarshal([]byte(out), &rows); err != nil || len(rows) != 1 {
			e.t.Fatalf("c%d: skeinctl network status -o json: %v:\n%s", i, err, out)
		}
		pods, _ := e.peerView(ctx, i)
		var want []string
		for _, m := range pods {
			want = append(want, m.seen.String())
		}
		real6, seen6 := e.external6Of(ctx, i, 1-i)
		r := rows[0]
		if r.RemotePodCIDR != lab.PodCIDR.String()+","+lab.PodCIDR6.String() || r.SeenPodCIDR != strings.Join(want, ",") ||
			!strings.Contains(r.RemoteExt, real6.String()) || !strings.Contains(r.SeenExt, seen6.String()) {
			e.t.Errorf("c%d: network status %+v: want pod CIDRs %v,%v seen as %v and the IPv6 external %v seen as %v", i, r, lab.PodCIDR, lab.PodCIDR6, want, real6, seen6)
		}
		e.reportf("network status: c%d: pods %s seen as %s; externals %s seen as %s", i, r.RemotePodCIDR, r.SeenPodCIDR, r.RemoteExt, r.SeenExt)
	}
}

// firstLine is the first line of s that contains sub, trimmed.
func firstLine(s, sub string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			return strings.Join(strings.Fields(l), " ")
		}
	}
	return ""
}

// rttRE is iputils ping's summary line.
var rttRE = regexp.MustCompile(`rtt min/avg/max/mdev = ([0-9.]+)/([0-9.]+)/([0-9.]+)/([0-9.]+) ms`)

// matrix6 is the matrix over IPv6: every probe pod to every probe pod of the peer, both ways,
// at the peer's pod's IPv6 address as remapped here, TCP and UDP (the far side must see the
// caller's IPv6 address as remapped there) and ICMPv6 echo (its round trip times reported).
func (e *env) matrix6(ctx context.Context) {
	var passed, failed int
	for _, dir := range [][2]int{{0, 1}, {1, 0}} {
		s, d := dir[0], dir[1]
		seenAs, _ := e.viewOf(ctx, d, s)
		dstAs, _ := e.viewOf(ctx, s, d)
		gw := e.gatewayNodeFor(ctx, s, d)
		for _, src := range e.probePods(ctx, s) {
			where := "other node"
			if src.Spec.NodeName == gw {
				where = "gateway node"
			}
			for _, dst := range e.probePods(ctx, d) {
				target, wantSrc := dstAs.of(podIP6(dst)), seenAs.of(podIP6(src))
				if !target.Is6() || !wantSrc.Is6() {
					e.t.Fatalf("c%d %s -> c%d %s: no IPv6 address as remapped (target %v, source %v): are both IPv6 pod CIDRs mapped?", s, src.Name, d, dst.Name, target, wantSrc)
				}
				for _, proto := range []string{"tcp", "udp", "icmpv6"} {
					var out string
					var err error
					seen := netip.AddrPortFrom(wantSrc, 0).String()
					if proto == "icmpv6" {
						out, err = e.ping(ctx, e.podNS(s, src), target.String())
						if m := rttRE.FindStringSubmatch(out); err == nil && m != nil {
							seen = "rtt min/avg/max " + m[1] + "/" + m[2] + "/" + m[3] + " ms"
						} else if err == nil {
							err = fmt.Errorf("no round trip times in ping's output")
						}
					} else {
						port := map[string]uint16{"tcp": 7070, "udp": 7071}[proto]
						out, err = e.probeIn(ctx, s, src, "call", "--timeout", "3s", proto, netip.AddrPortFrom(target, port).String())
						if err == nil && !strings.HasPrefix(out, dst.Name+" saw ["+wantSrc.String()+"]:") {
							err = fmt.Errorf("far side saw %q, want %s from [%s]", out, dst.Name, wantSrc)
						}
						if err == nil {
							seen = strings.TrimPrefix(out, dst.Name+" saw ")
						}
					}
					line := fmt.Sprintf("ipv6 matrix: c%d %s (%s, %s) -> c%d %s (%s) as %s: %s", s, src.Name, podIP6(src), where, d, dst.Name, podIP6(dst), target, proto)
					if err != nil {
						failed++
						e.t.Errorf("%s: %v: %s", line, err, out)
						e.reportf("%s FAIL", line)
						continue
					}
					passed++
					e.reportf("%s ok (%s)", line, seen)
				}
			}
		}
	}
	e.reportf("ipv6 matrix: %d passed, %d failed", passed, failed)
}
