package gateway_test

import (
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	netv1alpha1 "github.com/skein-net/skein/control/api/networking/v1alpha1"
	"github.com/skein-net/skein/control/gateway"
	"github.com/skein-net/skein/control/gateway/config"
	"github.com/skein-net/skein/dataplane/overlay"
)

func objects() gateway.Objects {
	ip := netv1alpha1.IP("10.80.0.1")
	return gateway.Objects{
		Server: &netv1alpha1.GatewayServer{
			ObjectMeta: metav1.ObjectMeta{Name: "gw", Namespace: "liqo-tenant-b"},
			Spec:       netv1alpha1.GatewayServerSpec{MTU: 1340, Endpoint: netv1alpha1.ServerEndpoint{Port: 51820}},
			Status:     netv1alpha1.GatewayServerStatus{InternalEndpoint: &netv1alpha1.InternalEndpoint{IP: &ip}},
		},
		Configuration: &netv1alpha1.Configuration{
			ObjectMeta: metav1.ObjectMeta{Name: "b", Namespace: "liqo-tenant-b"},
			Spec:       netv1alpha1.ConfigurationSpec{Remote: netv1alpha1.ClusterConfig{CIDR: netv1alpha1.ClusterConfigCIDR{Pod: "10.244.0.0/16", External: "10.70.0.0/16"}}},
			Status:     netv1alpha1.ConfigurationStatus{Remote: &netv1alpha1.ClusterConfig{CIDR: netv1alpha1.ClusterConfigCIDR{Pod: "10.71.0.0/16", External: "10.70.0.0/16"}}},
		},
		PeerKey: &netv1alpha1.PublicKey{Spec: netv1alpha1.PublicKeySpec{PublicKey: testPub}},
		Secret:  &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "gw-key"}, Data: map[string][]byte{config.SecretPrivateKey: []byte(testPriv)}},
		InternalNodes: []netv1alpha1.InternalNode{
			// This cluster's external CIDR is 10.79.0.0/16 (the peer's 10.70.0.0/16 is seen as is).
			{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Spec: netv1alpha1.InternalNodeSpec{ExternalIP: ptr.To(netv1alpha1.IP("10.79.0.1"))},
				Status: netv1alpha1.InternalNodeStatus{VTEP: &netv1alpha1.VTEP{IP: "192.168.77.1", MAC: "02:00:00:00:00:11"}}},
			{ObjectMeta: metav1.ObjectMeta{Name: "n2"}, Status: netv1alpha1.InternalNodeStatus{VTEP: &netv1alpha1.VTEP{IP: "192.168.77.2", MAC: "02:00:00:00:00:12"}}},
			{ObjectMeta: metav1.ObjectMeta{Name: "n3"}}, // no VTEP yet: skipped
		},
		Nodes: []corev1.Node{
			{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Spec: corev1.NodeSpec{PodCIDRs: []string{"10.244.1.0/24"}}},
			{ObjectMeta: metav1.ObjectMeta{Name: "n2"}}, // no pod CIDR: its pods get /32 routes
		},
		Pods: podAddrs(
			corev1.Pod{Spec: corev1.PodSpec{NodeName: "n1"}, Status: corev1.PodStatus{PodIP: "10.244.1.9"}},
			corev1.Pod{Spec: corev1.PodSpec{NodeName: "n2"}, Status: corev1.PodStatus{PodIP: "10.244.7.3"}},
			corev1.Pod{Spec: corev1.PodSpec{NodeName: "n2", HostNetwork: true}, Status: corev1.PodStatus{PodIP: "192.168.77.2"}},
			corev1.Pod{Spec: corev1.PodSpec{NodeName: "n9"}, Status: corev1.PodStatus{PodIP: "10.244.9.3"}}, // no such node
		),
	}
}

// podAddrs is the pod watch's view of pods: the PodAddr of each that has one.
func podAddrs(pods ...corev1.Pod) []gateway.PodAddr {
	var out []gateway.PodAddr
	for i := range pods {
		if a, ok := gateway.PodAddrOf(&pods[i]); ok {
			out = append(out, a)
		}
	}
	return out
}

var local = gateway.Local{PodIP: netip.MustParseAddr("10.244.1.20")}

func TestFromObjectsServer(t *testing.T) {
	g, err := gateway.FromObjects(objects(), local)
	if err != nil {
		t.Fatal(err)
	}
	if g.ListenPort != 51820 || g.PeerEndpoint.IsValid() || g.Keepalive != 0 {
		t.Errorf("server WireGuard: port %d endpoint %v keepalive %d", g.ListenPort, g.PeerEndpoint, g.Keepalive)
	}
	if g.TunnelIP.String() != "169.254.100.1" || g.OverlayListen.String() != "10.244.1.20:4789" {
		t.Errorf("tunnel IP %v, overlay %v", g.TunnelIP, g.OverlayListen)
	}
	dp := g.Dataplane
	if len(dp.NAT) != 1 || dp.NAT[0].From.String() != "10.71.0.0/16" || dp.NAT[0].To.String() != "10.244.0.0/16" {
		t.Errorf("NAT %v", dp.NAT)
	}
	allowed := map[string]bool{}
	for _, p := range g.AllowedIPs {
		allowed[p.String()] = true
	}
	if !allowed["10.244.0.0/16"] || !allowed["10.70.0.0/16"] || !allowed["169.254.100.2/32"] || len(allowed) != 3 {
		t.Errorf("allowed IPs %v", g.AllowedIPs)
	}
	// n1's external address (where replies to its host-network traffic go) is routed to it.
	if len(dp.Nodes) != 2 || dp.Nodes[0].PodCIDRs[0].String() != "10.244.1.0/24" || len(dp.Nodes[0].Pods) != 1 || dp.Nodes[0].Pods[0].String() != "10.79.0.1" ||
		len(dp.Nodes[1].Pods) != 1 || dp.Nodes[1].Pods[0].String() != "10.244.7.3" {
		t.Errorf("nodes %+v", dp.Nodes)
	}
	if dp.Overlay.IP.String() != "10.80.0.1" || dp.Overlay.MAC != overlay.GatewayMAC(dp.Overlay.IP) || dp.Overlay.VNI != netv1alpha1.DefaultVNI {
		t.Errorf("overlay %+v", dp.Overlay)
	}
}

func TestFromObjectsClient(t *testing.T) {
	o := objects()
	ip := netv1alpha1.IP("10.80.0.1")
	o.Server = nil
	o.Client = &netv1alpha1.GatewayClient{
		Spec:   netv1alpha1.GatewayClientSpec{MTU: 1340, Endpoint: netv1alpha1.Endpoint{Addresses: []netv1alpha1.Address{"gw.example"}, Port: 31820}},
		Status: netv1alpha1.GatewayClientStatus{InternalEndpoint: &netv1alpha1.InternalEndpoint{IP: &ip}},
	}
	l := local
	l.Resolve = func(host string) (netip.Addr, error) {
		if host != "gw.example" {
			return netip.Addr{}, errors.New("unknown")
		}
		return netip.MustParseAddr("192.0.2.10"), nil
	}
	g, err := gateway.FromObjects(o, l)
	if err != nil {
		t.Fatal(err)
	}
	if g.PeerEndpoint.String() != "192.0.2.10:31820" || g.Keepalive != 25 || g.TunnelIP.String() != "169.254.100.2" || g.ListenPort != 0 {
		t.Errorf("client: endpoint %v keepalive %d tunnel %v port %d", g.PeerEndpoint, g.Keepalive, g.TunnelIP, g.ListenPort)
	}
	l.Resolve = func(string) (netip.Addr, error) { return netip.Addr{}, errors.New("no such host") }
	if _, err := gateway.FromObjects(o, l); !errors.Is(err, gateway.ErrNotReady) {
		t.Errorf("unresolvable endpoint: %v, want not ready", err)
	}
	// An IPv6 endpoint, as written or resolved.
	o.Client.Spec.Endpoint.Addresses = []netv1alpha1.Address{"2001:db8::10"}
	if g, err := gateway.FromObjects(o, l); err != nil || g.PeerEndpoint.String() != "[2001:db8::10]:31820" {
		t.Errorf("IPv6 endpoint: %v, %v; want [2001:db8::10]:31820", g, err)
	}
}

// TestFromObjectsAdditionalCIDRs: every CIDR of the peer is translated (its second pod CIDR
// remapped, its second external CIDR not), and a spec that gained a CIDR the controller has not
// mapped yet waits rather than running with half the peer.
func TestFromObjectsAdditionalCIDRs(t *testing.T) {
	o := objects()
	cidr := &o.Configuration.Spec.Remote.CIDR
	cidr.AdditionalPods = []netv1alpha1.CIDR{"10.245.0.0/16"}
	cidr.AdditionalExternals = []netv1alpha1.CIDR{"10.73.0.0/24"}
	seen := &o.Configuration.Status.Remote.CIDR
	seen.AdditionalPods = []netv1alpha1.CIDR{"10.75.0.0/16"}
	seen.AdditionalExternals = []netv1alpha1.CIDR{"10.73.0.0/24"}
	g, err := gateway.FromObjects(o, local)
	if err != nil {
		t.Fatal(err)
	}
	nat := map[string]string{}
	for _, p := range g.Dataplane.NAT {
		nat[p.From.String()] = p.To.String()
	}
	if len(nat) != 2 || nat["10.71.0.0/16"] != "10.244.0.0/16" || nat["10.75.0.0/16"] != "10.245.0.0/16" {
		t.Errorf("NAT %v, want both pod CIDRs remapped", g.Dataplane.NAT)
	}
	allowed := map[string]bool{}
	for _, p := range g.AllowedIPs {
		allowed[p.String()] = true
	}
	for _, want := range []string{"10.244.0.0/16", "10.245.0.0/16", "10.70.0.0/16", "10.73.0.0/24"} {
		if !allowed[want] {
			t.Errorf("allowed IPs %v lack %s", g.AllowedIPs, want)
		}
	}

	seen.AdditionalExternals = nil // the controller has not caught up with the spec
	if _, err := gateway.FromObjects(o, local); !errors.Is(err, gateway.ErrNotReady) || !strings.Contains(err.Error(), "additionalExternals[0] is not mapped yet") {
		t.Errorf("spec ahead of status: %v, want not ready naming the field", err)
	}
}

// TestFromObjectsDualStack: the peer's IPv6 pods (an additional pod CIDR) remapped, the
// nodes' IPv6 pod CIDRs, and /128 routes for IPv6 pods outside them and for a node's IPv6
// external address; none for a pod claiming one of the gateways' own IPv6 addresses.
func TestFromObjectsDualStack(t *testing.T) {
	o := objects()
	o.Configuration.Spec.Remote.CIDR.AdditionalPods = []netv1alpha1.CIDR{"fd00:244::/48"}
	o.Configuration.Status.Remote.CIDR.AdditionalPods = []netv1alpha1.CIDR{"fd71::/48"}
	o.Nodes[0].Spec.PodCIDRs = []string{"10.244.1.0/24", "fd00:244:0:1::/64"}
	o.InternalNodes[0].Spec.ExternalIP6 = ptr.To(netv1alpha1.IP("fd00:70::1")) // its IPv6 host-network traffic's address
	o.Pods = podAddrs(
		corev1.Pod{Spec: corev1.PodSpec{NodeName: "n1"}, Status: corev1.PodStatus{PodIPs: []corev1.PodIP{{IP: "10.244.1.9"}, {IP: "fd00:244:0:1::9"}}}},
		corev1.Pod{Spec: corev1.PodSpec{NodeName: "n2"}, Status: corev1.PodStatus{PodIPs: []corev1.PodIP{{IP: "10.244.7.3"}, {IP: "fd00:244:0:7::3"}}}},
		corev1.Pod{Spec: corev1.PodSpec{NodeName: "n2"}, Status: corev1.PodStatus{PodIPs: []corev1.PodIP{{IP: "fd00:244:0:7::4"}}}},
		corev1.Pod{Spec: corev1.PodSpec{NodeName: "n2"}, Status: corev1.PodStatus{PodIPs: []corev1.PodIP{{IP: "64:ff9b:1::a50:1"}}}}, // the gateway's own
		corev1.Pod{Spec: corev1.PodSpec{NodeName: "n2"}, Status: corev1.PodStatus{PodIPs: []corev1.PodIP{{IP: "fd71::5"}}}},          // the peer's, as seen here
	)
	g, err := gateway.FromObjects(o, local)
	if err != nil {
		t.Fatal(err)
	}
	dp := g.Dataplane
	if fmt.Sprint(dp.NAT) != "[10.71.0.0/16->10.244.0.0/16 fd71::/48->fd00:244::/48]" {
		t.Errorf("NAT %v", dp.NAT)
	}
	if !strings.Contains(fmt.Sprint(g.AllowedIPs), "fd00:244::/48") || g.TunnelIP6.String() != "64:ff9b:1::a9fe:6401" || dp.OverlayIP6.String() != "64:ff9b:1::a50:1" {
		t.Errorf("allowed IPs %v, tunnel %v, overlay %v", g.AllowedIPs, g.TunnelIP6, dp.OverlayIP6)
	}
	byName := map[string]string{}
	for _, n := range dp.Nodes {
		byName[n.Name] = fmt.Sprint(n.PodCIDRs, n.Pods)
	}
	if byName["n1"] != "[10.244.1.0/24 fd00:244:0:1::/64] [10.79.0.1 fd00:70::1]" || byName["n2"] != "[] [10.244.7.3 fd00:244:0:7::3 fd00:244:0:7::4]" {
		t.Errorf("nodes %v", byName)
	}
}

// TestFromObjectsNoNodes: a gateway starts before any agent published its VTEP (the agents
// wait for the gateway's VTEP), with no node to deliver to.
func TestFromObjectsNoNodes(t *testing.T) {
	o := objects()
	o.InternalNodes = nil
	g, err := gateway.FromObjects(o, local)
	if err != nil {
		t.Fatalf("no InternalNodes: %v, want a gateway without nodes", err)
	}
	if len(g.Dataplane.Nodes) != 0 {
		t.Errorf("nodes %v, want none", g.Dataplane.Nodes)
	}
}

func TestFromObjectsWaiting(t *testing.T) {
	cases := []struct {
		mut   func(*gateway.Objects)
		ready bool
		want  string
	}{
		{func(o *gateway.Objects) { o.Secret = nil }, false, "key Secret"},
		{func(o *gateway.Objects) { o.PeerKey = nil }, false, "PublicKey"},
		{func(o *gateway.Objects) { o.Configuration.Status.Remote = nil }, false, "status.remote"},
		{func(o *gateway.Objects) { o.Configuration = nil }, false, "Configuration"},
		{func(o *gateway.Objects) { o.Server.Status.InternalEndpoint = nil }, false, "overlay address"},
		{func(o *gateway.Objects) { o.Secret.Data = nil }, true, `no "privateKey" key`},
		{func(o *gateway.Objects) { o.PeerKey.Spec.PublicKey = "nope" }, true, "not a WireGuard key"},
		{func(o *gateway.Objects) { o.Configuration.Status.Remote.CIDR.Pod = "10.71.0.0/24" }, true, "same length"},
		{func(o *gateway.Objects) { o.Server.Spec.MTU = 100 }, true, "tunnel MTU 100"},
		{func(o *gateway.Objects) { o.Client = &netv1alpha1.GatewayClient{} }, true, "exactly one"},
	}
	for _, tc := range cases {
		o := objects()
		tc.mut(&o)
		_, err := gateway.FromObjects(o, local)
		if err == nil || !strings.Contains(err.Error(), tc.want) || errors.Is(err, gateway.ErrNotReady) == tc.ready {
			t.Errorf("%v, want an error containing %q (not ready: %v)", err, tc.want, !tc.ready)
		}
	}
}

// TestForeignVTEPIgnored: an InternalNode whose VTEP is not an address of its Node (another
// node's agent pointing it at itself) is not used; one that is, is.
func TestForeignVTEPIgnored(t *testing.T) {
	o := objects()
	o.Nodes[0].Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "192.168.77.1"}}
	o.Nodes[1].Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "192.168.77.2"}}
	o.InternalNodes[1].Status.VTEP.IP = "192.168.77.1" // n2's VTEP pointed at n1
	g, err := gateway.FromObjects(o, local)
	if err != nil {
		t.Fatal(err)
	}
	if len(g.Dataplane.Nodes) != 1 || g.Dataplane.Nodes[0].Name != "n1" {
		t.Errorf("nodes %+v: want n1 alone (n2's VTEP is n1's address)", g.Dataplane.Nodes)
	}
}

// TestFromObjectsPodAddressClaims: Pods are made by anyone who may create pods, their
// addresses by the nodes' kubelets and CNIs, and an address can show on two pods at once (a
// finished pod's address reused on another node before the first's status says so, a pod
// left on a node that went silent, a kubelet that lies). One such pair made FromObjects fail
// (the route table refuses a /32 with two next hops), and so every change of the gateway's
// configuration until it went; so did a pod with the gateway's own overlay or tunnel address,
// or a node's external address. A pod on another node with the address of a pod inside a
// node's pod CIDR got a /32 that won over that CIDR and took the pod's traffic.
func TestFromObjectsPodAddressClaims(t *testing.T) {
	pod := func(node, ip string) gateway.PodAddr { return gateway.PodAddr{Node: node, IP: netip.MustParseAddr(ip)} }
	o := objects()
	// n1 routes 10.244.1.0/24 and its external address 10.79.0.1; n2 has no pod CIDR.
	o.Pods = []gateway.PodAddr{
		pod("n1", "10.244.1.9"), pod("n2", "10.244.1.9"), // n1's pod, by its CIDR; n2 claims it too
		pod("n1", "10.244.7.3"), pod("n2", "10.244.7.3"), // claimed from two nodes outside any CIDR
		pod("n2", "10.244.1.50"),                         // in n1's CIDR, but no pod of n1 has it (a CNI ignoring the Node's podCIDR)
		pod("n2", "10.244.8.8"),                          // an ordinary pod
		pod("n2", "10.244.8.9"), pod("n2", "10.244.8.9"), // the same pod address twice on one node
		pod("n2", "10.80.0.1"),     // the gateway's overlay address
		pod("n2", "169.254.100.1"), // the tunnel's
		pod("n2", "10.79.0.1"),     // n1's external address
		pod("n2", "192.168.77.1"),  // n1's VTEP
		pod("n2", "10.71.0.5"),     // in the peer's pod CIDR as seen here
		pod("n9", "10.244.9.9"),    // on a node that does not exist
	}
	g, err := gateway.FromObjects(o, local)
	if err != nil {
		t.Fatalf("one pod address on two nodes: %v", err)
	}
	got := map[string]string{}
	for _, n := range g.Dataplane.Nodes {
		got[n.Name] = fmt.Sprint(n.Pods)
	}
	if want := map[string]string{"n1": "[10.79.0.1]", "n2": "[10.244.1.50 10.244.8.8 10.244.8.9]"}; !maps.Equal(got, want) {
		t.Errorf("/32 routes %v, want %v", got, want)
	}
}

// TestFromObjectsExternalAddressClaims: a node's external address is routed to it only when
// it is nobody else's. Two InternalNodes with the same one (a hand edit, a stale object) must
// not fail the whole configuration, and one that is a pod's, a VTEP or the gateway's own must
// not take their traffic.
func TestFromObjectsExternalAddressClaims(t *testing.T) {
	o := objects()
	o.Nodes[0].Spec.PodCIDRs = []string{"10.244.1.0/24", "fd00:244:0:1::/64"}
	in := func(name, vtep, ext, ext6 string) netv1alpha1.InternalNode {
		n := netv1alpha1.InternalNode{ObjectMeta: metav1.ObjectMeta{Name: name},
			Status: netv1alpha1.InternalNodeStatus{VTEP: &netv1alpha1.VTEP{IP: netv1alpha1.IP(vtep), MAC: "02:00:00:00:00:21"}}}
		if ext != "" {
			n.Spec.ExternalIP = ptr.To(netv1alpha1.IP(ext))
		}
		if ext6 != "" {
			n.Spec.ExternalIP6 = ptr.To(netv1alpha1.IP(ext6))
		}
		return n
	}
	o.InternalNodes[0].Spec.ExternalIP6 = ptr.To(netv1alpha1.IP("fd00:70::1"))
	o.InternalNodes = append(o.InternalNodes,
		in("n4", "192.168.77.4", "10.79.0.4", "fd00:70::1"),       // n1's IPv6 external address
		in("n5", "192.168.77.5", "10.244.1.9", "fd00:244:0:1::9"), // pods of n1's CIDRs
		in("n6", "192.168.77.6", "10.80.0.1", "64:ff9b:1::a50:1"), // the gateway's overlay addresses
		in("n7", "192.168.77.7", "192.168.77.1", "fd00:70::7"),    // n1's VTEP
		in("n8", "192.168.77.8", "10.71.0.5", "fd00:70::8"),       // the peer's, as seen here
	)
	g, err := gateway.FromObjects(o, local)
	if err != nil {
		t.Fatalf("one external address on two nodes: %v", err)
	}
	got := map[string]string{}
	for _, n := range g.Dataplane.Nodes {
		got[n.Name] = fmt.Sprint(n.Pods)
	}
	want := map[string]string{"n1": "[10.79.0.1]", "n2": "[10.244.7.3]", "n4": "[10.79.0.4]", "n5": "[]", "n6": "[]", "n7": "[fd00:70::7]", "n8": "[fd00:70::8]"}
	if !maps.Equal(got, want) {
		t.Errorf("/32 and /128 routes %v, want %v", got, want)
	}
}
