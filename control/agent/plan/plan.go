// Package plan translates the API objects a node agent reads (its InternalNode, every
// Configuration, every GatewayServer and GatewayClient) into what it programs on its node
// (kernel.Desired and the host-network SNAT). It is a pure function of its inputs.
package plan

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	netv1alpha1 "github.com/skein-net/skein/control/api/networking/v1alpha1"
	"github.com/skein-net/skein/dataplane/kernel"
	"github.com/skein-net/skein/dataplane/overlay"
	"github.com/skein-net/skein/dataplane/packet"
)

// Node is what the agent knows of its node from flags and the environment.
type Node struct {
	Name string
	// IP is the node's underlay address (the overlay device's local address, its VTEP): IPv4,
	// or IPv6 in an IPv6-only cluster.
	IP netip.Addr
	// InternalCIDR is the cluster's internal CIDR (overlay addresses), for the prefix length of
	// the device's address. Default 10.80.0.0/16.
	InternalCIDR netip.Prefix
	// PodCIDRs are the cluster's pod CIDRs: host-network SNAT never touches them.
	PodCIDRs []netip.Prefix
	// Overlay device settings.
	Device       string // default liqo.vxlan
	Kind         overlay.Kind
	VNI          uint32
	Port         uint16
	MTU          int // of the device; default 1450 (1430 over an IPv6 underlay)
	RulePriority int
	// MasqueradeBypass keeps the source of pod traffic to peers whatever the node's other NAT
	// rules say (kernel.HostSNAT.MasqueradeBypass).
	MasqueradeBypass bool
	// LocalNetworks are the networks the node has addresses in (kernel.Netlink.LocalNetworks):
	// a remote CIDR overlapping one is not routed.
	LocalNetworks []netip.Prefix
	// UnguardedOverlay leaves out the overlay guard (kernel.OverlayGuard): the overlay device
	// then takes frames from any sender, with any inner IPv4 source its rp_filter (loose)
	// lets pass. For a pod network whose own rules the guard would contradict.
	UnguardedOverlay bool
}

// Objects are the API objects the agent reads.
type Objects struct {
	InternalNode *netv1alpha1.InternalNode
	// Nodes are every node's InternalNode (status.vtep is what is read), for the overlay
	// guard's senders.
	Nodes          []netv1alpha1.InternalNode
	Configurations []netv1alpha1.Configuration
	Servers        []netv1alpha1.GatewayServer
	Clients        []netv1alpha1.GatewayClient
}

// Plan is what the agent programs.
type Plan struct {
	Kernel kernel.Desired
	// SNAT is the host-network SNAT; nil when there is nothing to SNAT (no peer, or no
	// external address assigned to the node yet).
	SNAT *kernel.HostSNAT
	// Waiting lists peerings not programmed yet and why (for logs and conditions).
	Waiting []string
	// Refused lists remote CIDRs left out because routing them would take this node's own
	// traffic (the controller should never map them; the agent checks again).
	Refused []string
}

// refuse says why a remote CIDR must not be routed from this node ("" if it may): it overlaps
// a range that is never a peer's, covers the node's own address, overlaps a network the node
// has an address in, or overlaps the internal or the local pod CIDRs.
func (n Node) refuse(p, internal netip.Prefix) string {
	if p.Bits() == 0 {
		return "is a default route"
	}
	if f, ok := netv1alpha1.ForbiddenRange(p); ok {
		return "overlaps " + f.Prefix + " (" + f.Why + ")"
	}
	if n.IP.IsValid() && p.Contains(n.IP) {
		return fmt.Sprintf("covers this node's address %v", n.IP)
	}
	for _, l := range n.LocalNetworks {
		if p.Overlaps(l) && !p.Overlaps(internal) && !slices.ContainsFunc(n.PodCIDRs, p.Overlaps) {
			return fmt.Sprintf("overlaps %v, a network this node has an address in (its neighbours there, such as a DNS resolver or the API server, would be sent into the tunnel)", l)
		}
	}
	if p.Overlaps(internal) {
		return fmt.Sprintf("overlaps the internal CIDR %v", internal)
	}
	for _, pod := range n.PodCIDRs {
		if p.Overlaps(pod) {
			return fmt.Sprintf("overlaps the local pod CIDR %v", pod)
		}
	}
	return ""
}

// internal6 holds the overlay's IPv6 addresses (netv1alpha1.Internal6Prefix).
var internal6 = netip.MustParsePrefix(netv1alpha1.Internal6Prefix)

// ErrNoOverlayIP means the controller has not assigned the node's overlay address yet.
var ErrNoOverlayIP = errors.New("the node's InternalNode has no spec.overlayIP yet")

// FromObjects computes the plan. Peerings whose gateway has not published an active VTEP, or
// whose Configuration is not mapped yet, are left out and listed in Waiting.
func FromObjects(n Node, o Objects) (*Plan, error) {
	if o.InternalNode == nil || o.InternalNode.Spec.OverlayIP == nil {
		return nil, ErrNoOverlayIP
	}
	ip, err := netip.ParseAddr(string(*o.InternalNode.Spec.OverlayIP))
	if err != nil {
		return nil, fmt.Errorf("internalnode %s: spec.overlayIP %q: %w", o.InternalNode.Name, *o.InternalNode.Spec.OverlayIP, err)
	}
	internal := n.InternalCIDR
	if !internal.IsValid() {
		internal = netip.MustParsePrefix(netv1alpha1.DefaultInternalCIDR)
	}
	dev := n.Device
	if dev == "" {
		dev = netv1alpha1.DefaultOverlayDevice
	}
	kind := n.Kind
	if kind == 0 {
		kind = overlay.VXLAN
	}
	port := n.Port
	if port == 0 {
		port = kind.DefaultPort()
	}
	mtu := n.MTU
	if mtu == 0 {
		mtu = 1500 - overlay.Overhead
		if n.IP.Is6() {
			mtu = 1500 - overlay.Overhead6 // the outer header is IPv6
		}
	}
	vni := n.VNI
	if vni == 0 {
		vni = netv1alpha1.DefaultVNI
	}
	p := &Plan{Kernel: kernel.Desired{
		Overlay: kernel.Overlay{Name: dev, Kind: kind, VNI: vni, Port: port, Local: n.IP, Address: netip.PrefixFrom(ip, internal.Bits()), MTU: mtu,
			MAC: overlay.NodeMAC(n.IP)},
		RulePriority: n.RulePriority,
	}}

	// Remote CIDRs as seen here, by remote cluster id.
	remote := map[string][]netip.Prefix{}
	for _, c := range o.Configurations {
		id := c.Labels[netv1alpha1.RemoteClusterIDLabel]
		if id == "" {
			continue
		}
		if c.Status.Remote == nil {
			p.Waiting = append(p.Waiting, fmt.Sprintf("configuration %s/%s: not mapped yet", c.Namespace, c.Name))
			continue
		}
		// A status the controller no longer stands by (not Ready: a duplicate, exhausted
		// pools) is not routed, whatever it still says.
		if i := slices.IndexFunc(c.Status.Conditions, func(cd metav1.Condition) bool { return cd.Type == netv1alpha1.ConditionReady }); i >= 0 && c.Status.Conditions[i].Status == metav1.ConditionFalse {
			p.Waiting = append(p.Waiting, fmt.Sprintf("configuration %s/%s: not ready (%s)", c.Namespace, c.Name, c.Status.Conditions[i].Reason))
			continue
		}
		for _, s := range c.Status.Remote.CIDR.All() {
			pr, err := netip.ParsePrefix(string(s.CIDR))
			if err != nil || pr.Addr().Is4In6() || pr.Addr().Zone() != "" {
				continue
			}
			if why := n.refuse(pr.Masked(), internal); why != "" {
				p.Refused = append(p.Refused, fmt.Sprintf("configuration %s/%s: %v %s", c.Namespace, c.Name, pr.Masked(), why))
				continue
			}
			remote[id] = append(remote[id], pr.Masked())
		}
	}

	var gws []gw
	for _, s := range o.Servers {
		gws = append(gws, gw{s.Labels[netv1alpha1.RemoteClusterIDLabel], "gatewayserver " + s.Namespace + "/" + s.Name, s.Status.InternalEndpoint})
	}
	for _, c := range o.Clients {
		gws = append(gws, gw{c.Labels[netv1alpha1.RemoteClusterIDLabel], "gatewayclient " + c.Namespace + "/" + c.Name, c.Status.InternalEndpoint})
	}
	sort.Slice(gws, func(i, j int) bool { return gws[i].ref < gws[j].ref })
	// A peer's CIDR must not cover a gateway's VTEP: the overlay to the gateways runs there.
	var vteps []netip.Addr
	for _, g := range gws {
		if g.ie != nil && g.ie.VTEP != nil {
			if v, err := netip.ParseAddr(string(g.ie.VTEP.IP)); err == nil {
				vteps = append(vteps, v)
			}
		}
	}
	for id, routes := range remote {
		remote[id] = slices.DeleteFunc(routes, func(r netip.Prefix) bool {
			for _, v := range vteps {
				if r.Contains(v) {
					p.Refused = append(p.Refused, fmt.Sprintf("cluster %s: %v covers the gateway VTEP %v", id, r, v))
					return true
				}
			}
			return false
		})
	}
	sort.Strings(p.Refused)
	var snatRemote []netip.Prefix
	// Each gateway writes its own status: the overlay IP the controller gave it, and the MAC
	// derived from it (overlay.GatewayMAC). One that names another's MAC, or another's overlay
	// IP, would have every node send that peering's traffic to it; a MAC not derived from the
	// IP is refused, and an overlay IP two gateways claim is programmed for neither (the
	// controller puts the IP it gave back into the status).
	claims := map[netip.Addr][]string{}
	for _, g := range gws {
		if g.ie != nil && g.ie.IP != nil {
			if a, err := netip.ParseAddr(string(*g.ie.IP)); err == nil {
				claims[a] = append(claims[a], g.ref)
			}
		}
	}
	for _, g := range gws {
		routes := remote[g.id]
		switch {
		case g.id == "":
			p.Waiting = append(p.Waiting, g.ref+": no "+netv1alpha1.RemoteClusterIDLabel+" label")
			continue
		case len(routes) == 0:
			p.Waiting = append(p.Waiting, g.ref+": no mapped Configuration for cluster "+g.id)
			continue
		case g.ie == nil || g.ie.IP == nil || g.ie.VTEP == nil:
			p.Waiting = append(p.Waiting, g.ref+": no active replica published yet")
			continue
		}
		oip, err1 := netip.ParseAddr(string(*g.ie.IP))
		vtep, err2 := netip.ParseAddr(string(g.ie.VTEP.IP))
		mac, err3 := overlay.ParseMAC(string(g.ie.VTEP.MAC))
		if err := errors.Join(err1, err2, err3); err != nil {
			p.Waiting = append(p.Waiting, fmt.Sprintf("%s: status.internalEndpoint does not parse: %v", g.ref, err))
			continue
		}
		if want := overlay.GatewayMAC(oip); mac != want {
			p.Refused = append(p.Refused, fmt.Sprintf("%s: status.internalEndpoint.vtep.mac %s is not the MAC of its overlay IP %v (%s)", g.ref, overlay.MACString(mac), oip, overlay.MACString(want)))
			continue
		}
		if others := claims[oip]; len(others) > 1 {
			p.Refused = append(p.Refused, fmt.Sprintf("%s: overlay IP %v is claimed by %s: programmed for none of them", g.ref, oip, strings.Join(others, ", ")))
			continue
		}
		peer := kernel.Peer{OverlayIP: oip, MAC: mac, VTEP: vtep, Routes: routes}
		// IPv4 only: the relay node's IPv6 reverse-path filter (table ip6 skein-agent) is
		// strict and drops IPv6 from other nodes' pods arriving on the overlay device, and
		// one MAC serves both families; a peering with IPv6 routes goes to the pod.
		if relay, ok := n.relay(g.ie, o.Nodes); ok && !slices.ContainsFunc(routes, func(r netip.Prefix) bool { return r.Addr().Is6() }) {
			peer.MAC, peer.VTEP = relay.MAC, relay.Dst
		}
		// IPv6 routes go via the gateway's IPv6 overlay address, its IPv4 one inside
		// Internal6Prefix, on the device's IPv6 network.
		if slices.ContainsFunc(routes, func(r netip.Prefix) bool { return r.Addr().Is6() }) {
			peer.OverlayIP6 = netv1alpha1.Internal6(oip)
			p.Kernel.Overlay.Address6 = netip.PrefixFrom(netv1alpha1.Internal6(ip), internal6.Bits())
		}
		p.Kernel.Peers = append(p.Kernel.Peers, peer)
		snatRemote = append(snatRemote, routes...)
	}
	// Host-network SNAT per family, for the families the node has an external address of
	// (the controller gives one per family the cluster's pod CIDRs have): an IPv6 peer CIDR
	// without an IPv6 external address is routed for pods, and host traffic to it leaves
	// unSNATed (a cluster upgraded from a controller without IPv6 external CIDRs).
	ext4, ext6 := parseIP(o.InternalNode.Spec.ExternalIP), parseIP(o.InternalNode.Spec.ExternalIP6)
	snatRemote = slices.DeleteFunc(snatRemote, func(r netip.Prefix) bool {
		return r.Addr().Is4() && !ext4.Is4() || r.Addr().Is6() && (!ext6.Is6() || ext6.Is4In6())
	})
	// Overlay: IPv6 arriving on the device from a source not routed back through it is
	// dropped (the IPv6 twin of the device's rp_filter, in the ip6 table) whenever the device
	// carries IPv6, whether or not the node SNATs IPv6: an InternalNode without a usable
	// IPv6 external address must not open the node to forged IPv6.
	var filter string
	if p.Kernel.Overlay.Address6.IsValid() {
		filter = p.Kernel.Overlay.Name
	}
	var guard *kernel.OverlayGuard
	if !n.UnguardedOverlay && len(p.Kernel.Peers) > 0 {
		guard = n.guard(p.Kernel.Overlay, o.Nodes, gws)
	}
	if len(snatRemote) > 0 || filter != "" || guard != nil {
		slices.SortFunc(snatRemote, func(a, b netip.Prefix) int { return a.Addr().Compare(b.Addr()) })
		s := &kernel.HostSNAT{PodCIDRs: slices.Clone(n.PodCIDRs), Remote: slices.Compact(snatRemote), MasqueradeBypass: n.MasqueradeBypass, Overlay: filter, Relay: p.Kernel.Overlay.Name,
			Guard: guard}
		if ext4.Is4() {
			s.ExternalIP = ext4
		}
		if ext6.Is6() && !ext6.Is4In6() {
			s.ExternalIP6 = ext6
		}
		p.SNAT = s
	}
	// The objects come in the watch cache's order, which changes from call to call; what is
	// reported (logs, the InternalNode's Ready message) must not.
	sort.Strings(p.Waiting)
	sort.Strings(p.Refused)
	return p, nil
}

// gw is a GatewayServer or GatewayClient as the plan reads it.
type gw struct {
	id, ref string
	ie      *netv1alpha1.InternalEndpoint
}

// guard is the overlay guard of a node with peerings: the overlay's frames from every node
// that published its VTEP in its InternalNode (this one included) and from every gateway's
// VTEP, of the underlay's family. An address that is not unicast is
// left out: the guard admits no more than the nodes and gateways themselves.
func (n Node) guard(ov kernel.Overlay, nodes []netv1alpha1.InternalNode, gws []gw) *kernel.OverlayGuard {
	add := func(to []netip.Addr, ip string) []netip.Addr {
		a, err := netip.ParseAddr(ip)
		if err != nil || a.Zone() != "" || !a.IsGlobalUnicast() || a.Is4In6() || a.Is4() != n.IP.Is4() {
			return to
		}
		return append(to, a)
	}
	g := &kernel.OverlayGuard{Device: ov.Name, Port: ov.Port, VNI: ov.VNI, Nodes: []netip.Addr{n.IP}}
	for _, in := range nodes {
		if in.Status.VTEP != nil {
			g.Nodes = add(g.Nodes, string(in.Status.VTEP.IP))
		}
	}
	for _, w := range gws {
		if w.ie == nil {
			continue
		}
		if w.ie.VTEP != nil {
			g.Gateways = add(g.Gateways, string(w.ie.VTEP.IP))
		}
	}
	for _, l := range []*[]netip.Addr{&g.Nodes, &g.Gateways} {
		slices.SortFunc(*l, netip.Addr.Compare)
		*l = slices.Compact(*l)
	}
	return g
}

// relay is where this node sends a gateway's frames instead of the gateway pod: the
// liqo.vxlan of the node that runs the gateway (status.internalEndpoint.nodeVTEP), which
// forwards them to the pod over its own veth, so that the node-to-gateway leg is VXLAN over
// the underlay rather than VXLAN inside the pod network's tunnel (where the kernel segments
// every GSO packet). Not on the gateway's own node (its veth is the short way), and not when
// the published endpoint is unusable: not of this node's underlay family, not unicast, this
// node's own address, or the pod's (then nothing would change). ok false: send to the pod.
//
// The gateway writes nodeVTEP itself; only the node's own agent writes its InternalNode's
// status.vtep: nodeVTEP is used only when it is that of the InternalNode the gateway names
// (status.internalEndpoint.node), so a gateway cannot send the peering's traffic, or have the
// overlay guard admit frames, from an address no node published.
func (n Node) relay(ie *netv1alpha1.InternalEndpoint, nodes []netv1alpha1.InternalNode) (kernel.FDBEntry, bool) {
	if ie == nil || ie.NodeVTEP == nil || ie.VTEP == nil || ie.Node == nil || *ie.Node == n.Name {
		return kernel.FDBEntry{}, false
	}
	if i := slices.IndexFunc(nodes, func(in netv1alpha1.InternalNode) bool { return in.Name == *ie.Node }); i < 0 ||
		nodes[i].Status.VTEP == nil || nodes[i].Status.VTEP.IP != ie.NodeVTEP.IP {
		return kernel.FDBEntry{}, false
	}
	ip, err := netip.ParseAddr(string(ie.NodeVTEP.IP))
	if err != nil || ip.Zone() != "" || !ip.IsGlobalUnicast() || ip.Is4In6() || ip.Is4() != n.IP.Is4() || ip == n.IP {
		return kernel.FDBEntry{}, false
	}
	if pod, err := netip.ParseAddr(string(ie.VTEP.IP)); err == nil && pod == ip {
		return kernel.FDBEntry{}, false
	}
	mac, err := overlay.ParseMAC(string(ie.NodeVTEP.MAC))
	if err != nil || mac[0]&1 != 0 || mac == (packet.MAC{}) || mac != overlay.NodeMAC(ip) {
		// A node's overlay MAC is derived from its address (overlay.NodeMAC): another's, or
		// another node's, would send the frames elsewhere.
		return kernel.FDBEntry{}, false
	}
	return kernel.FDBEntry{MAC: mac, Dst: ip}, true
}

// parseIP is an optional unicast address of the API (an external address), the zero Addr
// when unset, malformed or not one a node can SNAT to (link-local, loopback, multicast: the
// kernel table would refuse it, and the whole apply with it).
func parseIP(ip *netv1alpha1.IP) netip.Addr {
	if ip == nil {
		return netip.Addr{}
	}
	a, err := netip.ParseAddr(string(*ip))
	if err != nil || a.Zone() != "" || !a.IsGlobalUnicast() {
		return netip.Addr{}
	}
	return a
}
