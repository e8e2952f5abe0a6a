package v1alpha1

import "net/netip"

// The spec's defaults, written once: flags, the gateway's configuration builder, the node
// agent's plan and skeinctl take them from here. The kubebuilder default markers on the types
// repeat MTU and port as literals (markers cannot name a constant); a test checks that the
// generated CRDs agree with these.
const (
	// DefaultMTU is the tunnel MTU of GatewayServer and GatewayClient (spec.mtu).
	DefaultMTU = 1340
	// DefaultPort is the gateway server's WireGuard port (spec.endpoint.port).
	DefaultPort = 51820
	// DefaultVNI is the overlay's VXLAN/Geneve network identifier; the number of the table.
	DefaultVNI = 18952
	// RouteTable is the routing table the node agent fills with routes to the gateways.
	RouteTable = 18952
	// DefaultOverlayDevice is the node's overlay device.
	DefaultOverlayDevice = "liqo.vxlan"
	// DefaultInternalCIDR holds the overlay addresses of nodes and gateways.
	DefaultInternalCIDR = "10.80.0.0/16"
	// Internal6Prefix holds the IPv6 addresses of gateways and nodes on the overlay and in
	// the tunnel: each is its IPv4 address inside this /96 (Internal6), so they need no
	// allocation of their own and both ends of a route agree on them. It lies in RFC 8215's
	// local-use translation prefix 64:ff9b:1::/48, which is no cluster's pods and which no
	// peer's CIDR may overlap (it lies in ::/8, one of ForbiddenRemoteRanges); unlike
	// fe80::/10 the kernel forwards packets from it, so the ICMPv6 errors a gateway sends from
	// it reach pods.
	Internal6Prefix = "64:ff9b:1::/96"
)

// Internal6 is the IPv6 address of a gateway's or node's IPv4 overlay or tunnel address a
// (Internal6Prefix); it returns a unchanged when a is not IPv4.
func Internal6(a netip.Addr) netip.Addr {
	if !a.Is4() {
		return a
	}
	b := netip.MustParsePrefix(Internal6Prefix).Addr().As16()
	v := a.As4()
	copy(b[12:], v[:])
	return netip.AddrFrom16(b)
}

// ForbiddenRemoteRange is a range a peer's CIDRs may never overlap, with why.
// +kubebuilder:object:generate=false
type ForbiddenRemoteRange struct {
	Prefix string
	Why    string
}

// ForbiddenRemoteRanges can never be a peer's pods or nodes: routing them to a gateway would
// take this cluster's own traffic with them. Admission refuses Configurations that overlap
// them (the CEL rules on ClusterConfigCIDR repeat the list, one rule per family; a test keeps
// them equal), and
// the controller and the node agent check again.
var ForbiddenRemoteRanges = []ForbiddenRemoteRange{
	{"0.0.0.0/8", "this network"},
	{"127.0.0.0/8", "loopback"},
	{"169.254.0.0/16", "link-local: cloud metadata, the tunnel"},
	{"224.0.0.0/4", "multicast"},
	{"240.0.0.0/4", "reserved"},
	{"::/8", "unspecified, loopback, IPv4-mapped and other reserved addresses"},
	{"fe80::/10", "link-local"},
	{"ff00::/8", "multicast"},
}

// ForbiddenRange returns the first of ForbiddenRemoteRanges that p overlaps, if any: the one
// check admission's rule, the controller, the node agent and the gateway's builder share.
func ForbiddenRange(p netip.Prefix) (ForbiddenRemoteRange, bool) {
	for _, f := range ForbiddenRemoteRanges {
		if netip.MustParsePrefix(f.Prefix).Overlaps(p) {
			return f, true
		}
	}
	return ForbiddenRemoteRange{}, false
}

// DefaultMinRemotePrefixLength is the shortest prefix the controller accepts from a peer:
// a /7 is 33 million addresses, more than any cluster has pods.
const DefaultMinRemotePrefixLength = 8

// DefaultMinRemotePrefixLength6 is the same for IPv6: a /32 is what a registry allocates a
// whole network operator; a cluster's pods take a /48 to a /64 per node.
const DefaultMinRemotePrefixLength6 = 32
