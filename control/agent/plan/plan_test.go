package plan_test

import (
	"errors"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/skein-net/skein/control/agent/plan"
	netv1alpha1 "github.com/skein-net/skein/control/api/networking/v1alpha1"
	"github.com/skein-net/skein/dataplane/kernel"
	"github.com/skein-net/skein/dataplane/overlay"
)

func ipp(s string) *netv1alpha1.IP { v := netv1alpha1.IP(s); return &v }

func objects() plan.Objects {
	lb := func(id string) map[string]string { return map[string]string{netv1alpha1.RemoteClusterIDLabel: id} }
	return plan.Objects{
		InternalNode: &netv1alpha1.InternalNode{ObjectMeta: metav1.ObjectMeta{Name: "n1"},
			Spec: netv1alpha1.InternalNodeSpec{OverlayIP: ipp("10.80.0.11"), ExternalIP: ipp("10.70.0.11")}},
		Configurations: []netv1alpha1.Configuration{
			{ObjectMeta: metav1.ObjectMeta{Name: "b", Namespace: "t-b", Labels: lb("b")},
				Status: netv1alpha1.ConfigurationStatus{Remote: &netv1alpha1.ClusterConfig{CIDR: netv1alpha1.ClusterConfigCIDR{Pod: "10.71.0.0/16", External: "10.72.0.0/16"}}}},
			{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "t-c", Labels: lb("c")}}, // not mapped yet
		},
		Servers: []netv1alpha1.GatewayServer{
			{ObjectMeta: metav1.ObjectMeta{Name: "gw", Namespace: "t-b", Labels: lb("b")},
				Status: netv1alpha1.GatewayServerStatus{InternalEndpoint: &netv1alpha1.InternalEndpoint{IP: ipp("10.80.0.1"),
					VTEP: &netv1alpha1.VTEP{IP: "10.244.1.20", MAC: "02:5b:7a:69:e7:c7"}}}},
		},
		Clients: []netv1alpha1.GatewayClient{
			{ObjectMeta: metav1.ObjectMeta{Name: "gw", Namespace: "t-c", Labels: lb("c")}},
		},
	}
}

var node = plan.Node{Name: "n1", IP: netip.MustParseAddr("192.168.77.1"), PodCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}}

func TestFromObjects(t *testing.T) {
	p, err := plan.FromObjects(node, objects())
	if err != nil {
		t.Fatal(err)
	}
	o := p.Kernel.Overlay
	if o.Name != "liqo.vxlan" || o.Address.String() != "10.80.0.11/16" || o.Local != node.IP || o.MTU != 1450 || o.Port != 4789 || o.VNI != 18952 {
		t.Errorf("overlay %+v", o)
	}
	if len(p.Kernel.Peers) != 1 {
		t.Fatalf("peers %+v", p.Kernel.Peers)
	}
	peer := p.Kernel.Peers[0]
	if peer.OverlayIP.String() != "10.80.0.1" || peer.VTEP.String() != "10.244.1.20" || len(peer.Routes) != 2 {
		t.Errorf("peer %+v", peer)
	}
	if p.SNAT == nil || p.SNAT.ExternalIP.String() != "10.70.0.11" || len(p.SNAT.Remote) != 2 || p.SNAT.PodCIDRs[0].String() != "10.244.0.0/16" {
		t.Errorf("SNAT %+v", p.SNAT)
	}
	waiting := strings.Join(p.Waiting, "; ")
	if !strings.Contains(waiting, "t-c/c: not mapped yet") || !strings.Contains(waiting, "gatewayclient t-c/gw: no mapped Configuration") {
		t.Errorf("waiting: %s", waiting)
	}
}

// TestFromObjectsAdditionalCIDRs: a peer's further pod and external CIDRs are routed like its
// first ones.
func TestFromObjectsAdditionalCIDRs(t *testing.T) {
	o := objects()
	o.Configurations[0].Status.Remote.CIDR.AdditionalPods = []netv1alpha1.CIDR{"10.75.0.0/16"}
	o.Configurations[0].Status.Remote.CIDR.AdditionalExternals = []netv1alpha1.CIDR{"10.76.0.0/24"}
	p, err := plan.FromObjects(node, o)
	if err != nil {
		t.Fatal(err)
	}
	var routes []string
	for _, r := range p.Kernel.Peers[0].Routes {
		routes = append(routes, r.String())
	}
	if got := strings.Join(routes, " "); got != "10.71.0.0/16 10.72.0.0/16 10.75.0.0/16 10.76.0.0/24" {
		t.Errorf("routes %s", got)
	}
	if len(p.SNAT.Remote) != 4 {
		t.Errorf("SNAT remote %v, want all four CIDRs", p.SNAT.Remote)
	}
}

// TestFromObjectsNotReady: a Configuration whose Ready condition is False (a duplicate,
// exhausted pools) is not routed, whatever its status still holds.
func TestFromObjectsNotReady(t *testing.T) {
	o := objects()
	o.Configurations[0].Status.Conditions = []metav1.Condition{{Type: netv1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: "DuplicateClusterID"}}
	p, err := plan.FromObjects(node, o)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Kernel.Peers) != 0 || !strings.Contains(strings.Join(p.Waiting, "; "), "t-b/b: not ready (DuplicateClusterID)") {
		t.Errorf("peers %+v, waiting %q", p.Kernel.Peers, p.Waiting)
	}
}

func TestFromObjectsNoOverlayIP(t *testing.T) {
	o := objects()
	o.InternalNode.Spec.OverlayIP = nil
	if _, err := plan.FromObjects(node, o); !errors.Is(err, plan.ErrNoOverlayIP) {
		t.Errorf("%v", err)
	}
	o = objects()
	o.Servers = nil
	p, err := plan.FromObjects(node, o)
	if err != nil || len(p.Kernel.Peers) != 0 || p.SNAT != nil {
		t.Errorf("no gateways: %+v %v", p, err)
	}
}

// TestRefusesDangerousCIDRs: whatever a Configuration's status says, the agent never routes to
// a gateway a CIDR that holds its node's address, a gateway VTEP, the internal or the local pod
// CIDR, or a special range; the rest of the peering is programmed.
func TestRefusesDangerousCIDRs(t *testing.T) {
	for _, tc := range []struct {
		name, pod, says string
	}{
		{"the node's own network (Calico's default pool kept as-is)", "192.168.0.0/16", "covers this node's address 192.168.77.1"},
		{"half the Internet", "128.0.0.0/1", "overlaps 169.254.0.0/16"},
		{"a default route", "0.0.0.0/0", "default route"},
		{"link-local", "169.254.0.0/16", "169.254.0.0/16 (link-local"},
		{"the gateway's VTEP", "10.244.1.0/24", "overlaps the local pod CIDR"},
		{"the internal CIDR", "10.80.0.0/12", "overlaps the internal CIDR 10.80.0.0/16"},
		{"multicast", "224.0.0.0/8", "multicast"},
	} {
		o := objects()
		o.Configurations[0].Status.Remote.CIDR.Pod = netv1alpha1.CIDR(tc.pod)
		p, err := plan.FromObjects(node, o)
		if err != nil {
			t.Fatal(err)
		}
		refused := strings.Join(p.Refused, "; ")
		if !strings.Contains(refused, tc.pod) || !strings.Contains(refused, tc.says) {
			t.Errorf("%s: refused %q, want %s refused saying %q", tc.name, refused, tc.pod, tc.says)
		}
		if len(p.Kernel.Peers) != 1 || len(p.Kernel.Peers[0].Routes) != 1 || p.Kernel.Peers[0].Routes[0].String() != "10.72.0.0/16" {
			t.Errorf("%s: peers %+v, want the external CIDR alone", tc.name, p.Kernel.Peers)
		}
	}

	// A CIDR that holds a gateway's VTEP outside the pod CIDR (a host-network gateway).
	o := objects()
	o.Servers[0].Status.InternalEndpoint.VTEP.IP = "172.18.0.9"
	o.Configurations[0].Status.Remote.CIDR.Pod = "172.18.0.0/16"
	p, err := plan.FromObjects(node, o)
	if err != nil {
		t.Fatal(err)
	}
	if r := strings.Join(p.Refused, "; "); !strings.Contains(r, "172.18.0.0/16 covers the gateway VTEP 172.18.0.9") || len(p.Kernel.Peers[0].Routes) != 1 {
		t.Errorf("VTEP: refused %q, routes %v", r, p.Kernel.Peers[0].Routes)
	}
	if p, _ := plan.FromObjects(node, objects()); len(p.Refused) != 0 {
		t.Errorf("refused %v in the ordinary case", p.Refused)
	}

	// A peer CIDR that overlaps a network the node has an address in (the VPC subnet with its
	// DNS resolver and the API server) but not the node's own address.
	withNets := node
	withNets.LocalNetworks = []netip.Prefix{netip.MustParsePrefix("10.71.0.0/24"), netip.MustParsePrefix("172.17.0.0/16")}
	p, err = plan.FromObjects(withNets, objects())
	if err != nil {
		t.Fatal(err)
	}
	if r := strings.Join(p.Refused, "; "); !strings.Contains(r, "10.71.0.0/16 overlaps 10.71.0.0/24, a network this node has an address in") ||
		len(p.Kernel.Peers) != 1 || len(p.Kernel.Peers[0].Routes) != 1 || p.Kernel.Peers[0].Routes[0].String() != "10.72.0.0/16" {
		t.Errorf("local network: refused %q, peers %+v", r, p.Kernel.Peers)
	}
}

// TestFromObjectsOrderFree: the plan does not depend on the order of the objects (a watch
// cache lists them in no fixed order): what it reports goes into the InternalNode's status,
// and a message that changed with the order would be written again on every reconcile.
func TestFromObjectsOrderFree(t *testing.T) {
	o := objects()
	for i := range 6 {
		id := string(rune('d' + i))
		o.Configurations = append(o.Configurations, netv1alpha1.Configuration{ObjectMeta: metav1.ObjectMeta{Name: id, Namespace: "t-" + id,
			Labels: map[string]string{netv1alpha1.RemoteClusterIDLabel: id}}}) // not mapped yet
	}
	// A mapped peer whose CIDR covers the node: refused.
	o.Configurations = append(o.Configurations, netv1alpha1.Configuration{ObjectMeta: metav1.ObjectMeta{Name: "x", Namespace: "t-x",
		Labels: map[string]string{netv1alpha1.RemoteClusterIDLabel: "x"}},
		Status: netv1alpha1.ConfigurationStatus{Remote: &netv1alpha1.ClusterConfig{CIDR: netv1alpha1.ClusterConfigCIDR{Pod: "192.168.0.0/16", External: "10.73.0.0/16"}}}})
	first, err := plan.FromObjects(node, o)
	if err != nil {
		t.Fatal(err)
	}
	if len(first.Waiting) < 7 || len(first.Refused) == 0 {
		t.Fatalf("waiting %q, refused %q", first.Waiting, first.Refused)
	}
	for i := range 20 {
		r := o
		r.Configurations = slices.Clone(o.Configurations)
		rand.New(rand.NewPCG(uint64(i), 1)).Shuffle(len(r.Configurations), func(a, b int) {
			r.Configurations[a], r.Configurations[b] = r.Configurations[b], r.Configurations[a]
		})
		p, err := plan.FromObjects(node, r)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(p.Waiting, first.Waiting) || !slices.Equal(p.Refused, first.Refused) {
			t.Fatalf("shuffle %d: waiting %q refused %q; first %q %q", i, p.Waiting, p.Refused, first.Waiting, first.Refused)
		}
	}
}

// TestFromObjectsDualStack: a peer's IPv6 CIDRs are routed via the gateway's IPv6 overlay
// address (its IPv4 one inside 64:ff9b:1::/96), the device gets its own IPv6 overlay address
// on that network, host-network SNAT takes the IPv6 CIDRs once the node has an IPv6 external
// address (and only then), and an IPv6 CIDR overlapping a network the
// node has an address in (or a forbidden range) is refused like an IPv4 one.
func TestFromObjectsDualStack(t *testing.T) {
	o := objects()
	o.Configurations[0].Status.Remote.CIDR.AdditionalPods = []netv1alpha1.CIDR{"fd71::/48", "fd00:77::/64", "::ffff:10.9.0.0/112"}
	n := node
	n.LocalNetworks = []netip.Prefix{netip.MustParsePrefix("fd00:77::/64")}
	n.PodCIDRs = []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("fd00:244::/56")} // a dual-stack cluster
	p, err := plan.FromObjects(n, o)
	if err != nil {
		t.Fatal(err)
	}
	if a := p.Kernel.Overlay.Address6.String(); a != "64:ff9b:1::a50:b/96" {
		t.Errorf("overlay IPv6 address %s, want 64:ff9b:1::a50:b/96", a)
	}
	peer := p.Kernel.Peers[0]
	if peer.OverlayIP6.String() != "64:ff9b:1::a50:1" || !slices.Contains(peer.Routes, netip.MustParsePrefix("fd71::/48")) ||
		slices.Contains(peer.Routes, netip.MustParsePrefix("fd00:77::/64")) || len(peer.Routes) != 3 {
		t.Errorf("peer %+v: want fd71::/48 via 64:ff9b:1::a50:1 beside the IPv4 routes, not fd00:77::/64 nor the IPv4-mapped CIDR", peer)
	}
	if !strings.Contains(strings.Join(p.Refused, "; "), "fd00:77::/64 overlaps fd00:77::/64, a network this node has an address in") {
		t.Errorf("refused: %v", p.Refused)
	}
	// The node has no IPv6 external address yet (a controller without --external-cidr6):
	// IPv4 SNAT alone, and the IPv6 peer CIDR is routed all the same.
	if p.SNAT == nil || len(p.SNAT.Remote) != 2 || p.SNAT.ExternalIP6.IsValid() || !slices.Equal(p.SNAT.PodCIDRs, n.PodCIDRs) {
		t.Errorf("SNAT %+v: want the two IPv4 CIDRs only, without an IPv6 external address, and both pod CIDRs", p.SNAT)
	}
	// With one, fd71::/48 is SNATed to it too.
	ext6 := netv1alpha1.IP("fd00:70::b")
	o.InternalNode = o.InternalNode.DeepCopy()
	o.InternalNode.Spec.ExternalIP6 = &ext6
	if p, err = plan.FromObjects(n, o); err != nil {
		t.Fatal(err)
	}
	if p.SNAT == nil || p.SNAT.ExternalIP6 != netip.MustParseAddr("fd00:70::b") || !slices.Contains(p.SNAT.Remote, netip.MustParsePrefix("fd71::/48")) || len(p.SNAT.Remote) != 3 || p.SNAT.Overlay != "liqo.vxlan" {
		t.Errorf("SNAT %+v: want fd71::/48 beside the IPv4 CIDRs, to fd00:70::b, IPv6 from liqo.vxlan filtered", p.SNAT)
	}
	// An IPv6-only node (no IPv4 external address, IPv6 peer CIDRs only).
	o6 := objects()
	o6.InternalNode = o.InternalNode.DeepCopy()
	o6.InternalNode.Spec.ExternalIP = nil
	o6.Configurations[0].Status.Remote.CIDR = netv1alpha1.ClusterConfigCIDR{Pod: "fd71::/48", External: "fd72::/112"}
	n.PodCIDRs = []netip.Prefix{netip.MustParsePrefix("fd00:244::/56")}
	if p, err = plan.FromObjects(n, o6); err != nil {
		t.Fatal(err)
	}
	if p.SNAT == nil || p.SNAT.ExternalIP.IsValid() || p.SNAT.ExternalIP6 != netip.MustParseAddr("fd00:70::b") || len(p.SNAT.Remote) != 2 {
		t.Errorf("IPv6-only SNAT %+v: want fd71::/48 and fd72::/112 to fd00:70::b, no IPv4 address", p.SNAT)
	}
	// A malformed IPv6 external address (an agent must not trust its InternalNode blindly):
	// no IPv6 SNAT, no error, and IPv6 from liqo.vxlan still filtered (the routes through it
	// are there all the same).
	for _, bad := range []netv1alpha1.IP{"fe80::1%eth0", "fe80::1", "ff02::1", "::1", "not an address"} {
		o6.InternalNode.Spec.ExternalIP6 = &bad
		if p, err = plan.FromObjects(n, o6); err != nil || p.SNAT == nil || len(p.SNAT.Remote) != 0 || p.SNAT.Overlay != "liqo.vxlan" {
			t.Errorf("with external IPv6 %s: SNAT %+v, %v; want none, IPv6 from liqo.vxlan filtered", bad, p.SNAT, err)
		}
	}
	// An IPv4-only plan has no IPv6 filter (a node without IPv6 needs no ip6 table).
	if p, _ := plan.FromObjects(node, objects()); p.SNAT == nil || p.SNAT.Overlay != "" {
		t.Errorf("IPv4-only SNAT %+v: want no IPv6 filter", p.SNAT)
	}
	// Without IPv6 routes, no IPv6 at all.
	if p, _ := plan.FromObjects(node, objects()); p.Kernel.Overlay.Address6.IsValid() || p.Kernel.Peers[0].OverlayIP6.IsValid() {
		t.Errorf("an IPv4-only plan has IPv6 addresses: %+v", p.Kernel)
	}
}

// TestFromObjectsRelay: a node that does not run the gateway sends the gateway's frames to the
// liqo.vxlan of the node that does (status.internalEndpoint.nodeVTEP), the neighbour entry of
// the gateway's overlay address at that node's MAC; the gateway's own node, and any endpoint
// that cannot be a node's, keep the gateway pod's VTEP.
func TestFromObjectsRelay(t *testing.T) {
	withRelay := func(nodeName, ip, mac string) plan.Objects {
		o := objects()
		ie := o.Servers[0].Status.InternalEndpoint
		ie.Node = &nodeName
		ie.NodeVTEP = &netv1alpha1.VTEP{IP: netv1alpha1.IP(ip), MAC: netv1alpha1.MAC(mac)}
		// The node named publishes the same endpoint (its agent's InternalNode status).
		o.Nodes = []netv1alpha1.InternalNode{{ObjectMeta: metav1.ObjectMeta{Name: nodeName},
			Status: netv1alpha1.InternalNodeStatus{VTEP: &netv1alpha1.VTEP{IP: netv1alpha1.IP(ip), MAC: netv1alpha1.MAC(mac)}}}}
		return o
	}
	cases := []struct {
		name              string
		o                 plan.Objects
		wantVTEP, wantMAC string
	}{
		{"another node runs the gateway", withRelay("n2", "192.168.77.2", "02:5a:ce:40:a7:1f"), "192.168.77.2", "02:5a:ce:40:a7:1f"},
		{"this node runs the gateway", withRelay("n1", "192.168.77.1", "02:5a:00:00:00:01"), "10.244.1.20", "02:5b:7a:69:e7:c7"},
		{"no node endpoint published", objects(), "10.244.1.20", "02:5b:7a:69:e7:c7"},
		{"this node's own address under another name", withRelay("n2", "192.168.77.1", "02:5a:ce:40:a7:1f"), "10.244.1.20", "02:5b:7a:69:e7:c7"},
		{"IPv6 on an IPv4 underlay", withRelay("n2", "2001:db8::2", "02:5a:ce:40:a7:1f"), "10.244.1.20", "02:5b:7a:69:e7:c7"},
		{"loopback", withRelay("n2", "127.0.0.1", "02:5a:ce:40:a7:1f"), "10.244.1.20", "02:5b:7a:69:e7:c7"},
		{"multicast", withRelay("n2", "239.1.1.1", "02:5a:ce:40:a7:1f"), "10.244.1.20", "02:5b:7a:69:e7:c7"},
		{"the pod's own address", withRelay("n2", "10.244.1.20", "02:5a:ce:40:a7:1f"), "10.244.1.20", "02:5b:7a:69:e7:c7"},
		{"a broadcast MAC", withRelay("n2", "192.168.77.2", "ff:ff:ff:ff:ff:ff"), "10.244.1.20", "02:5b:7a:69:e7:c7"},
		{"a zero MAC", withRelay("n2", "192.168.77.2", "00:00:00:00:00:00"), "10.244.1.20", "02:5b:7a:69:e7:c7"},
		{"not an address", withRelay("n2", "node-2", "02:5a:ce:40:a7:1f"), "10.244.1.20", "02:5b:7a:69:e7:c7"},
		{"a nodeVTEP the node named did not publish", func() plan.Objects {
			o := withRelay("n2", "192.168.77.2", "02:5a:ce:40:a7:1f")
			o.Nodes[0].Status.VTEP.IP = "192.168.77.3"
			return o
		}(), "10.244.1.20", "02:5b:7a:69:e7:c7"},
		{"no node named", func() plan.Objects {
			o := withRelay("n2", "192.168.77.2", "02:5a:ce:40:a7:1f")
			o.Servers[0].Status.InternalEndpoint.Node = nil
			return o
		}(), "10.244.1.20", "02:5b:7a:69:e7:c7"},
		{"a peering with IPv6 routes", func() plan.Objects {
			o := withRelay("n2", "192.168.77.2", "02:5a:ce:40:a7:1f")
			o.Configurations[0].Status.Remote.CIDR.Pod = "fd00:71::/56"
			return o
		}(), "10.244.1.20", "02:5b:7a:69:e7:c7"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, err := plan.FromObjects(node, c.o)
			if err != nil {
				t.Fatal(err)
			}
			if len(p.Kernel.Peers) != 1 {
				t.Fatalf("peers %+v", p.Kernel.Peers)
			}
			peer := p.Kernel.Peers[0]
			if peer.VTEP.String() != c.wantVTEP || overlay.MACString(peer.MAC) != c.wantMAC || peer.OverlayIP.String() != "10.80.0.1" || len(peer.Routes) != 2 {
				t.Errorf("peer %+v, want VTEP %s MAC %s via 10.80.0.1", peer, c.wantVTEP, c.wantMAC)
			}
		})
	}
}

// TestGatewayClaimsHeld (found by an attack review): a gateway writes its own status, and
// in it another gateway's overlay MAC, or overlay IP, with its own VTEP: every node would send
// that other peering's traffic to it (one FDB entry per MAC, one neighbour per IP). A MAC not
// derived from the gateway's overlay IP is refused; an overlay IP two gateways claim is
// programmed for neither; a relay node's MAC must be the one derived from its address.
func TestGatewayClaimsHeld(t *testing.T) {
	lb := func(id string) map[string]string { return map[string]string{netv1alpha1.RemoteClusterIDLabel: id} }
	conf := func(ns, id, pod string) netv1alpha1.Configuration {
		return netv1alpha1.Configuration{ObjectMeta: metav1.ObjectMeta{Name: id, Namespace: ns, Labels: lb(id)},
			Status: netv1alpha1.ConfigurationStatus{Remote: &netv1alpha1.ClusterConfig{CIDR: netv1alpha1.ClusterConfigCIDR{Pod: netv1alpha1.CIDR(pod)}}}}
	}
	mac := func(ip string) string { return overlay.MACString(overlay.GatewayMAC(netip.MustParseAddr(ip))) }
	server := func(ns, id, ip, vtep, mac string) netv1alpha1.GatewayServer {
		return netv1alpha1.GatewayServer{ObjectMeta: metav1.ObjectMeta{Name: "gw", Namespace: ns, Labels: lb(id)},
			Status: netv1alpha1.GatewayServerStatus{InternalEndpoint: &netv1alpha1.InternalEndpoint{IP: ipp(ip),
				VTEP: &netv1alpha1.VTEP{IP: netv1alpha1.IP(vtep), MAC: netv1alpha1.MAC(mac)}}}}
	}
	victim := server("t-b", "b", "10.80.0.1", "10.244.1.20", mac("10.80.0.1"))
	for _, tc := range []struct {
		name     string
		attacker netv1alpha1.GatewayServer
		want     string // in Refused
		victim   bool   // the victim's peering is still programmed, to its own VTEP
	}{
		{"another's MAC", server("t-x", "x", "10.80.0.2", "10.244.3.66", mac("10.80.0.1")), "is not the MAC of its overlay IP 10.80.0.2", true},
		{"another's overlay IP", server("t-x", "x", "10.80.0.1", "10.244.3.66", mac("10.80.0.1")), "overlay IP 10.80.0.1 is claimed by", false},
		{"an honest neighbour", server("t-x", "x", "10.80.0.2", "10.244.3.66", mac("10.80.0.2")), "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := plan.Objects{
				InternalNode: &netv1alpha1.InternalNode{ObjectMeta: metav1.ObjectMeta{Name: "n1"},
					Spec: netv1alpha1.InternalNodeSpec{OverlayIP: ipp("10.80.0.11"), ExternalIP: ipp("10.70.0.11")}},
				Configurations: []netv1alpha1.Configuration{conf("t-b", "b", "10.71.0.0/16"), conf("t-x", "x", "10.73.0.0/16")},
				Servers:        []netv1alpha1.GatewayServer{victim, tc.attacker},
			}
			p, err := plan.FromObjects(node, o)
			if err != nil {
				t.Fatal(err)
			}
			refused := strings.Join(p.Refused, "; ")
			if (tc.want == "") != (refused == "") || !strings.Contains(refused, tc.want) {
				t.Errorf("refused %q, want %q", refused, tc.want)
			}
			for _, peer := range p.Kernel.Peers {
				if peer.VTEP.String() == "10.244.3.66" && peer.MAC == overlay.GatewayMAC(netip.MustParseAddr("10.80.0.1")) {
					t.Errorf("the attacker's VTEP got the victim's MAC: %+v", peer)
				}
				if peer.OverlayIP.String() == "10.80.0.1" && peer.VTEP.String() != "10.244.1.20" {
					t.Errorf("the victim's overlay IP goes to %v", peer.VTEP)
				}
			}
			programmed := slices.ContainsFunc(p.Kernel.Peers, func(peer kernel.Peer) bool { return peer.VTEP.String() == "10.244.1.20" })
			if programmed != tc.victim {
				t.Errorf("the victim's peering programmed %v, want %v (peers %+v)", programmed, tc.victim, p.Kernel.Peers)
			}
		})
	}
	// A relay whose MAC is not its node's: the pod is sent to directly.
	gs := victim
	gs.Status.InternalEndpoint.NodeVTEP = &netv1alpha1.VTEP{IP: "192.168.77.2", MAC: "02:5a:00:00:00:02"}
	gs.Status.InternalEndpoint.Node = func() *string { s := "n2"; return &s }()
	p, err := plan.FromObjects(node, plan.Objects{InternalNode: &netv1alpha1.InternalNode{ObjectMeta: metav1.ObjectMeta{Name: "n1"},
		Spec: netv1alpha1.InternalNodeSpec{OverlayIP: ipp("10.80.0.11")}}, Configurations: []netv1alpha1.Configuration{conf("t-b", "b", "10.71.0.0/16")},
		Servers: []netv1alpha1.GatewayServer{gs}})
	if err != nil || len(p.Kernel.Peers) != 1 || p.Kernel.Peers[0].VTEP.String() != "10.244.1.20" {
		t.Errorf("a relay with a MAC not its node's: %v %+v", err, p.Kernel.Peers)
	}
}

// TestFromObjectsGuard: the overlay guard admits the nodes that published a VTEP (this one
// always) and the gateways' VTEPs, not the node a gateway says it runs on; nothing that is not a
// unicast address of the underlay's family; no guard without peerings or when turned off.
func TestFromObjectsGuard(t *testing.T) {
	o := objects()
	o.Servers[0].Status.InternalEndpoint.NodeVTEP = &netv1alpha1.VTEP{IP: "192.168.77.9", MAC: netv1alpha1.MAC(overlay.MACString(overlay.NodeMAC(netip.MustParseAddr("192.168.77.9"))))}
	inode := func(name, ip string) netv1alpha1.InternalNode {
		in := netv1alpha1.InternalNode{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if ip != "" {
			in.Status.VTEP = &netv1alpha1.VTEP{IP: netv1alpha1.IP(ip), MAC: "02:00:00:00:00:01"}
		}
		return in
	}
	o.Nodes = []netv1alpha1.InternalNode{inode("n2", "192.168.77.2"), inode("n3", "192.168.77.3"), inode("n4", ""),
		inode("multicast", "224.0.0.1"), inode("unspecified", "0.0.0.0"), inode("v6", "fd00::2"), inode("garbage", "a.b"),
		inode("loopback", "127.0.0.1"), inode("n1", "192.168.77.1"), inode("dup", "192.168.77.2")}
	p, err := plan.FromObjects(node, o)
	if err != nil {
		t.Fatal(err)
	}
	if p.SNAT == nil || p.SNAT.Guard == nil {
		t.Fatalf("SNAT %+v: want a guard", p.SNAT)
	}
	g := p.SNAT.Guard
	if g.Device != "liqo.vxlan" || g.Port != 4789 || g.VNI != 18952 {
		t.Errorf("guard %+v: want liqo.vxlan, 4789, 18952", g)
	}
	// 192.168.77.9, the gateway's nodeVTEP, is no node's published VTEP: not admitted.
	if got := fmtAddrs(g.Nodes); got != "192.168.77.1 192.168.77.2 192.168.77.3" {
		t.Errorf("nodes %s", got)
	}
	if got := fmtAddrs(g.Gateways); got != "10.244.1.20" {
		t.Errorf("gateways %s", got)
	}

	// A node without an external address yet is guarded all the same.
	o.InternalNode.Spec.ExternalIP = nil
	if p, _ := plan.FromObjects(node, o); p.SNAT == nil || p.SNAT.Guard == nil || len(p.SNAT.Remote) != 0 {
		t.Errorf("without an external address: SNAT %+v, want the guard alone", p.SNAT)
	}
	off := node
	off.UnguardedOverlay = true
	if p, _ := plan.FromObjects(off, o); p.SNAT != nil {
		t.Errorf("unguarded, without an external address: SNAT %+v, want none", p.SNAT)
	}
	o.Servers = nil
	if p, _ := plan.FromObjects(node, o); p.SNAT != nil {
		t.Errorf("without peerings: SNAT %+v, want none", p.SNAT)
	}
}

func fmtAddrs(as []netip.Addr) string {
	var s []string
	for _, a := range as {
		s = append(s, a.String())
	}
	return strings.Join(s, " ")
}
