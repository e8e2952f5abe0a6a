package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/skein-net/skein/bench/lab"
	netv1alpha1 "github.com/skein-net/skein/control/api/networking/v1alpha1"
	"github.com/skein-net/skein/dataplane/overlay"
)

// TestE2EIPv6Only peers two IPv6-only clusters (lab.Options.IPv6Only) that overlap: pods of
// each get an IPv6 address from fd00:244::/56 and nothing else, Services come from
// fd00:96::/112, and every node, API server and the registry are reached over IPv6 alone. skein
// is installed with the chart given the IPv6 pod and service CIDRs (docs/install.md) and the
// registry's bracketed address, and peered with skeinctl network connect: the server's NodePort
// endpoint is a node's IPv6 address, the gateways' WireGuard runs over IPv6, the overlay between
// nodes and gateways runs over IPv6 (the agents' node IPs and the gateways' VTEPs are IPv6), and
// each cluster's controller must remap the peer's IPv6 pod CIDR into its IPv6 pool. Then pods
// reach the peer's pods through the remapped CIDR (TCP, UDP and ICMPv6 both ways, the far side
// seeing the caller as remapped on its side), and host-network processes too, seen from their
// node's address in the IPv6 external CIDR, the only external CIDR an IPv6-only cluster has.
func TestE2EIPv6Only(t *testing.T) {
	e := setupLab(t, false, lab.Options{IPv6Only: true})
	var services []string
	for _, s := range e.l.ServiceCIDRs {
		services = append(services, s.String())
	}
	e.installSets = []string{"ipam.serviceCIDR={" + strings.Join(services, ",") + "}"}
	defer func() { fmt.Printf("\n=== skein end-to-end report (IPv6 only)\n%s\n", e.report.String()) }()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if !t.Run("ipv6-only-lab", func(t *testing.T) { e.t = t; e.ipv6OnlyLab(ctx) }) {
		return
	}
	if !t.Run("install", func(t *testing.T) { e.t = t; e.install(ctx, 1) }) {
		return
	}
	e.probes(ctx)
	if !t.Run("ipv6-only-pods", func(t *testing.T) { e.t = t; e.ipv6OnlyPods(ctx) }) {
		return
	}
	t.Run("cluster-dns", func(t *testing.T) { e.t = t; e.clusterDNS(ctx) })
	if !t.Run("connect", func(t *testing.T) { e.t = t; e.connect(ctx) }) {
		return
	}
	if !t.Run("ipv6-mapped", func(t *testing.T) { e.t = t; e.ipv6Mapped(ctx) }) {
		return
	}
	t.Run("ipv6-endpoints", func(t *testing.T) { e.t = t; e.ipv6Endpoints(ctx) })
	t.Run("ipv6-routes", func(t *testing.T) { e.t = t; e.ipv6Routes(ctx) })
	t.Run("ipv6-matrix", func(t *testing.T) { e.t = t; e.matrix6(ctx) })
	t.Run("ipv6-host-network", func(t *testing.T) { e.t = t; e.noIPv4External(ctx); e.hostNetwork6(ctx) })
	t.Run("test-network", func(t *testing.T) { e.t = t; e.testNetworkFamilies(ctx, map[string]int{"IPv6": 16}) })
}

// noIPv4External: an IPv6-only cluster publishes its IPv6 external CIDR as spec.remote.cidr.external
// (no IPv4 one), and its nodes get no IPv4 external address.
func (e *env) noIPv4External(ctx context.Context) {
	for i := range 2 {
		var confs netv1alpha1.ConfigurationList
		if err := e.c[1-i].List(ctx, &confs); err != nil || len(confs.Items) != 1 {
			e.t.Fatalf("cluster %d: want one Configuration (%v)", 1-i, err)
		}
		if ext := confs.Items[0].Spec.Remote.CIDR.External; !strings.Contains(string(ext), ":") || len(confs.Items[0].Spec.Remote.CIDR.AdditionalExternals) != 0 {
			e.t.Errorf("cluster %d publishes external %s, additional %v: want its IPv6 external CIDR alone", i, ext, confs.Items[0].Spec.Remote.CIDR.AdditionalExternals)
		}
		var nodes netv1alpha1.InternalNodeList
		if err := e.c[i].List(ctx, &nodes); err != nil {
			e.t.Fatal(err)
		}
		for _, in := range nodes.Items {
			if in.Spec.ExternalIP != nil || in.Spec.ExternalIP6 == nil {
				e.t.Errorf("cluster %d InternalNode %s: external %v, external6 %v; want an IPv6 one only", i, in.Name, in.Spec.ExternalIP, in.Spec.ExternalIP6)
			}
		}
	}
}

// ipv6OnlyLab: the lab's premise holds, or the test proves nothing: every Node's addresses
// are IPv6 (its InternalIP, which the agent takes as its node IP), its pod CIDRs are IPv6
// inside lab.PodCIDR6, the API servers are reached at IPv6 addresses, the registry too, and no
// node's underlay link has an IPv4 address.
func (e *env) ipv6OnlyLab(ctx context.Context) {
	if !strings.HasPrefix(e.l.Registry, "[") {
		e.t.Errorf("the lab's registry is %q, not at an IPv6 address", e.l.Registry)
	}
	for i, cl := range e.l.Clusters {
		if !strings.HasPrefix(cl.APIServer, "https://[") {
			e.t.Errorf("cluster %d: API server %s, not at an IPv6 address", i, cl.APIServer)
		}
		var nodes corev1.NodeList
		if err := e.c[i].List(ctx, &nodes); err != nil || len(nodes.Items) != len(cl.Nodes) {
			e.t.Fatalf("cluster %d: %d Nodes (%v), want %d", i, len(nodes.Items), err, len(cl.Nodes))
		}
		for _, n := range nodes.Items {
			var internal []string
			for _, a := range n.Status.Addresses {
				if a.Type != corev1.NodeInternalIP && a.Type != corev1.NodeExternalIP {
					continue
				}
				internal = append(internal, a.Address)
				if ip, err := netip.ParseAddr(a.Address); err != nil || !ip.Is6() {
					e.t.Errorf("cluster %d: Node %s has %s address %s, not IPv6", i, n.Name, a.Type, a.Address)
				}
			}
			if len(internal) == 0 {
				e.t.Errorf("cluster %d: Node %s has no InternalIP", i, n.Name)
			}
			for _, c := range n.Spec.PodCIDRs {
				if p, err := netip.ParsePrefix(c); err != nil || !p.Addr().Is6() || !lab.PodCIDR6.Overlaps(p) {
					e.t.Errorf("cluster %d: Node %s has pod CIDR %s, want IPv6 ones inside %v only", i, n.Name, c, lab.PodCIDR6)
				}
			}
			e.reportf("ipv6-only lab: cluster %d Node %s: addresses %v, pod CIDRs %v", i, n.Name, internal, n.Spec.PodCIDRs)
		}
		for _, n := range cl.Nodes {
			out, err := exec.CommandContext(ctx, "ip", "-n", n.Name, "-4", "-o", "addr", "show", "dev", "eth0").CombinedOutput()
			if err != nil || strings.TrimSpace(string(out)) != "" {
				e.t.Errorf("cluster %d: %s's underlay link has IPv4: %v: %s", i, n.Name, err, out)
			}
		}
	}
	e.reportf("ipv6-only lab: registry %s; API servers %s and %s", e.l.Registry, e.l.Clusters[0].APIServer, e.l.Clusters[1].APIServer)
}

// ipv6OnlyPods: every probe pod and every skein pod that is not on the host network has IPv6
// addresses only, inside lab.PodCIDR6, in both clusters.
func (e *env) ipv6OnlyPods(ctx context.Context) {
	for i := range 2 {
		var pods corev1.PodList
		if err := e.c[i].List(ctx, &pods); err != nil {
			e.t.Fatal(err)
		}
		checked := 0
		for _, p := range pods.Items {
			if p.Spec.HostNetwork || p.Status.PodIP == "" {
				continue
			}
			checked++
			for _, ip := range p.Status.PodIPs {
				if a, err := netip.ParseAddr(ip.IP); err != nil || !a.Is6() || !lab.PodCIDR6.Contains(a) {
					e.t.Errorf("cluster %d: pod %s/%s has address %s, want IPv6 ones inside %v only", i, p.Namespace, p.Name, ip.IP, lab.PodCIDR6)
				}
			}
			if p.Labels["app"] == "probe" {
				e.reportf("ipv6-only pods: cluster %d pod %s on %s: %v", i, p.Name, p.Spec.NodeName, p.Status.PodIPs)
			}
		}
		if checked < 3 { // two probe pods and the controller at least
			e.t.Errorf("cluster %d: %d pods off the host network, want at least 3", i, checked)
		}
	}
}

// ipv6Mapped: each cluster's Configuration publishes the peer's one pod CIDR, fd00:244::/56
// (an IPv6 CIDR as the primary pod CIDR), and maps it into a prefix of the same length inside
// the IPv6 pool fd00::/8 that is not the local pod CIDR; the Configuration is Ready.
func (e *env) ipv6Mapped(ctx context.Context) {
	pool6 := netip.MustParsePrefix("fd00::/8")
	for i := range 2 {
		pods, external := e.peerView(ctx, i)
		if len(pods) != 1 {
			e.t.Fatalf("cluster %d sees %d pod CIDRs of its peer, want 1 (IPv6): %v", i, len(pods), pods)
		}
		m := pods[0]
		switch {
		case m.real != lab.PodCIDR6:
			e.t.Errorf("cluster %d: the peer publishes pod CIDR %v, want %v", i, m.real, lab.PodCIDR6)
		case !m.seen.Addr().Is6() || m.seen.Bits() != m.real.Bits():
			e.t.Errorf("cluster %d: the peer's %v seen as %v: another family or length", i, m.real, m.seen)
		case m.seen.Overlaps(lab.PodCIDR6):
			e.t.Errorf("cluster %d: the peer's %v seen as %v, which clashes with the local pod CIDR", i, m.real, m.seen)
		case !pool6.Contains(m.seen.Addr()):
			e.t.Errorf("cluster %d: the peer's %v seen as %v, outside the IPv6 pool %v", i, m.real, m.seen, pool6)
		}
		cf, ready := e.readyConfiguration(ctx, i)
		e.reportf("ipv6 mapped: cluster %d Configuration %s (%s): spec.remote.cidr pod %s; status.remote.cidr pod %s, external %v",
			i, cf.Name, ready, cf.Spec.Remote.CIDR.Pod, cf.Status.Remote.CIDR.Pod, external)
	}
}

// peerEndpointRE is the gateway's skein_gateway_peer_info sample: its role and the peer's
// current WireGuard endpoint.
var peerEndpointRE = regexp.MustCompile(`skein_gateway_peer_info\{[^}]*\}`)

// ipv6Endpoints: the peering runs over IPv6 end to end. The GatewayServer publishes IPv6
// addresses (its NodePort on the nodes' IPv6 InternalIPs) and the GatewayClient dials one; both
// gateways' VTEPs (their pods' addresses, where the nodes' overlay devices send) and every
// node's VTEP are IPv6; and each active gateway's WireGuard peer endpoint, as wireguard-go sees
// it (skein_gateway_peer_info), is an IPv6 address and port: for the client the server's
// published address, for the server where the client's packets came from.
func (e *env) ipv6Endpoints(ctx context.Context) {
	is6 := func(s string) bool { a, err := netip.ParseAddr(s); return err == nil && a.Is6() }
	var srvs netv1alpha1.GatewayServerList
	if err := e.c[1].List(ctx, &srvs); err != nil || len(srvs.Items) != 1 {
		e.t.Fatalf("cluster 1: want one GatewayServer: %v", err)
	}
	var clis netv1alpha1.GatewayClientList
	if err := e.c[0].List(ctx, &clis); err != nil || len(clis.Items) != 1 {
		e.t.Fatalf("cluster 0: want one GatewayClient: %v", err)
	}
	srv, cli := srvs.Items[0], clis.Items[0]
	if srv.Status.Endpoint == nil || len(srv.Status.Endpoint.Addresses) == 0 {
		e.t.Fatalf("GatewayServer %s publishes no endpoint", srv.Name)
	}
	published := map[string]bool{}
	for _, a := range srv.Status.Endpoint.Addresses {
		if !is6(string(a)) {
			e.t.Errorf("GatewayServer %s publishes endpoint address %s, not IPv6", srv.Name, a)
		}
		published[netip.AddrPortFrom(netip.MustParseAddr(string(a)), uint16(srv.Status.Endpoint.Port)).String()] = true
	}
	for _, a := range cli.Spec.Endpoint.Addresses {
		if !is6(string(a)) {
			e.t.Errorf("GatewayClient %s dials %s, not an IPv6 address", cli.Name, a)
		}
	}
	e.reportf("ipv6 endpoints: GatewayServer %s (c1) at %v port %d; GatewayClient %s (c0) dials %v port %d",
		srv.Name, srv.Status.Endpoint.Addresses, srv.Status.Endpoint.Port, cli.Name, cli.Spec.Endpoint.Addresses, cli.Spec.Endpoint.Port)
	for side, ie := range map[string]*netv1alpha1.InternalEndpoint{"server (c1)": srv.Status.InternalEndpoint, "client (c0)": cli.Status.InternalEndpoint} {
		if ie == nil || ie.VTEP == nil || !is6(string(ie.VTEP.IP)) {
			e.t.Errorf("the %s gateway's VTEP is not an IPv6 address: %+v", side, ie)
			continue
		}
		e.reportf("ipv6 endpoints: the %s gateway's VTEP %s", side, ie.VTEP.IP)
	}
	for i := range 2 {
		var ins netv1alpha1.InternalNodeList
		if err := e.c[i].List(ctx, &ins); err != nil || len(ins.Items) != len(e.l.Clusters[i].Nodes) {
			e.t.Fatalf("cluster %d: %d InternalNodes (%v), want one per node", i, len(ins.Items), err)
		}
		for _, in := range ins.Items {
			if in.Status.VTEP == nil || !is6(string(in.Status.VTEP.IP)) {
				e.t.Errorf("cluster %d: InternalNode %s's VTEP is not IPv6: %+v", i, in.Name, in.Status.VTEP)
				continue
			}
			// The agent holds everything it planned for the node (no route refused, no apply
			// failing on an IPv6-only node).
			ready := "no Ready condition"
			for _, c := range in.Status.Conditions {
				if c.Type == netv1alpha1.ConditionReady {
					ready = fmt.Sprintf("Ready=%s %s %q", c.Status, c.Reason, c.Message)
					if c.Status != metav1.ConditionTrue {
						e.t.Errorf("cluster %d: InternalNode %s: %s", i, in.Name, ready)
					}
				}
			}
			e.reportf("ipv6 endpoints: cluster %d InternalNode %s: VTEP %s, %s", i, in.Name, in.Status.VTEP.IP, ready)
		}
		// The overlay devices leave room for the outer IPv6 header, as the gateways do: the
		// underlay link's MTU less overlay.Overhead6.
		for j, n := range e.l.Clusters[i].Nodes {
			under, dev := linkMTU(ctx, n.Name, "eth0"), linkMTU(ctx, n.Name, "liqo.vxlan")
			if under == 0 || dev != under-overlay.Overhead6 {
				e.t.Errorf("cluster %d: %s's liqo.vxlan has MTU %d on an IPv6 underlay of MTU %d, want %d", i, e.l.Clusters[i].NodeName(j), dev, under, under-overlay.Overhead6)
			}
			e.reportf("ipv6 endpoints: c%d %s: liqo.vxlan MTU %d over eth0 MTU %d", i, e.l.Clusters[i].NodeName(j), dev, under)
		}
	}
	// What wireguard-go itself uses: each active gateway's peer endpoint.
	for i := range 2 {
		active := e.activeGateway(ctx, i)
		var endpoint string
		for _, tg := range e.scrapeTargets(ctx, i) {
			if tg.pod.Name != active.Name {
				continue
			}
			scrape, err := e.scrape(ctx, tg)
			if err != nil {
				e.t.Fatalf("cluster %d: %v", i, err)
			}
			sample := peerEndpointRE.FindString(scrape)
			if m := regexp.MustCompile(`peer_endpoint="([^"]*)"`).FindStringSubmatch(sample); m != nil {
				endpoint = m[1]
			}
			if !strings.Contains(scrape, "skein_gateway_last_handshake_timestamp_seconds ") {
				e.t.Errorf("cluster %d: gateway %s has had no WireGuard handshake", i, active.Name)
			}
		}
		ap, err := netip.ParseAddrPort(endpoint)
		switch {
		case err != nil || !ap.Addr().Is6():
			e.t.Errorf("cluster %d: gateway %s's WireGuard peer endpoint is %q, not an IPv6 address and port", i, active.Name, endpoint)
		case i == 0 && !published[ap.String()]:
			e.t.Errorf("the client gateway %s sends to %s, none of the server's published endpoints %v", active.Name, ap, srv.Status.Endpoint.Addresses)
		}
		e.reportf("ipv6 endpoints: cluster %d's active gateway %s: WireGuard peer endpoint %s", i, active.Name, endpoint)
	}
}

// linkMTU is the MTU of link dev in network namespace ns, or 0.
func linkMTU(ctx context.Context, ns, dev string) int {
	out, err := exec.CommandContext(ctx, "ip", "-n", ns, "-o", "link", "show", "dev", dev).Output()
	if err != nil {
		return 0
	}
	f := strings.Fields(string(out))
	for k := 0; k+1 < len(f); k++ {
		if f[k] == "mtu" {
			mtu, _ := strconv.Atoi(f[k+1])
			return mtu
		}
	}
	return 0
}
