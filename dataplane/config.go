package dataplane

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/skein-net/skein/dataplane/nat"
	"github.com/skein-net/skein/dataplane/overlay"
	"github.com/skein-net/skein/dataplane/packet"
	"github.com/skein-net/skein/dataplane/route"
)

// Config is everything the packet path needs; the standalone config file and the in-cluster
// watchers both translate into it. Reconfig swaps it whole.
type Config struct {
	// Overlay is the gateway's VTEP: kind, VNI, overlay MAC and IP. Its Peers are filled from
	// Nodes; any listed are kept as extra accepted sources.
	Overlay overlay.Config
	// OverlayPort is the UDP port of the nodes' overlay devices (where frames to nodes go).
	// Default: the kind's IANA port.
	OverlayPort uint16

	// TunnelMTU is the largest inner packet sent into the WireGuard tunnel (the spec's
	// Connection MTU; default 1340). SYNs are clamped to fit it.
	TunnelMTU int
	// OverlayMTU is the largest inner packet sent to a node over the overlay (the nodes'
	// liqo.vxlan MTU; default 1450, a 1500-byte IPv4 underlay minus VXLAN overhead: set 1430
	// over an IPv6 one).
	OverlayMTU int

	// TunnelIP is the gateway's own address inside the tunnel, the source of ICMP errors it
	// sends into the tunnel. Optional: without it, no errors are sent that way.
	TunnelIP netip.Addr
	// TunnelIP6 and OverlayIP6 are the gateway's IPv6 addresses inside the tunnel and on the
	// overlay: the sources of the ICMPv6 errors it sends into the tunnel and to local pods.
	// Optional: without one, no ICMPv6 errors are sent that way (the packets are dropped and
	// counted all the same).
	TunnelIP6, OverlayIP6 netip.Addr

	// Remote are the prefixes routed into the tunnel, as this cluster sees them (remapped
	// CIDRs, NAT-less remote CIDRs, the peer gateway's tunnel address). NAT From prefixes are
	// routed into the tunnel without being listed here.
	Remote []netip.Prefix
	// NAT maps the remote cluster's CIDRs as seen here (From) to how the remote cluster
	// numbers them (To). Into the tunnel destinations are translated From -> To; out of it,
	// sources To -> From.
	NAT []nat.Pair
	// DropUnmatched drops packets whose translated address matches no NAT pair instead of
	// passing them unchanged. Either way they are counted.
	DropUnmatched bool
	// LocalNAT presents this site's own networks to the peer under other prefixes: From is a
	// local network as the nodes number it, To how the peer sees it. Into the tunnel sources
	// are translated From -> To; out of it, destinations To -> From (and routed by the
	// translated address). With LocalNAT set, a packet into the tunnel whose source matches no
	// pair, or out of it to a local address not under a To prefix, is dropped: real local
	// addresses never cross. Empty: the peer sees local addresses as they are.
	LocalNAT []nat.Pair

	// Nodes are this cluster's node VTEPs and what they host.
	Nodes []Node
	// RelayNode names the node (of Nodes) the gateway runs on. Agents of the other nodes may
	// send their frames through it (status.internalEndpoint.nodeVTEP: the node decapsulates
	// and re-encapsulates them to the gateway pod over its own veth), so frames from its VTEP
	// may carry the sources of any node's pods; every other node still speaks only for its
	// own. Empty: no node relays. (The node hosting the gateway can write into the gateway's
	// pod anyway; what the relay adds to its powers is written in docs/security.md.)
	RelayNode string
	// Local are the gateway's own addresses (overlay IP, tunnel IP); packets to them go to the
	// local handler (the netstack), not through NAT.
	Local []netip.Addr

	// CompleteChecksums recomputes the TCP and UDP checksums of packets from the overlay in
	// full. Needed when the nodes' overlay devices keep TX checksum offload on (for TSO), since
	// their packets may then arrive with the checksum only started (see docs/design-notes.md).
	CompleteChecksums bool

	// ICMPRate is how many ICMP errors per second the gateway sends at most (token bucket,
	// ICMPBurst deep). Defaults 100 and 20; a negative rate sends none.
	ICMPRate  int
	ICMPBurst int
}

// Node is a node of this cluster as the gateway sees it.
type Node struct {
	Name string
	// VTEP is the node's underlay address, where its overlay device listens.
	VTEP netip.Addr
	// MAC is the MAC address of the node's overlay device.
	MAC packet.MAC
	// PodCIDRs and Pods are routed to this node; a pod /32 wins over a node CIDR.
	PodCIDRs []netip.Prefix
	Pods     []netip.Addr
}

// HasIPv6 reports whether the node hosts IPv6 pods (an IPv6 pod CIDR or pod address).
func (n Node) HasIPv6() bool {
	for _, p := range n.PodCIDRs {
		if p.Addr().Is6() {
			return true
		}
	}
	for _, a := range n.Pods {
		if a.Is6() {
			return true
		}
	}
	return false
}

// Defaults.
const (
	DefaultTunnelMTU  = 1340
	DefaultOverlayMTU = 1500 - overlay.Overhead
	DefaultICMPRate   = 100
	DefaultICMPBurst  = 20
	// MinMTU and MaxMTU bound both MTUs (the API's range).
	MinMTU = 576
	MaxMTU = 9000
)

// next-hop IDs in the route table: the tunnel, the local handler, then node i at hopNode+i.
const (
	hopTunnel = 0
	hopLocal  = 1
	hopNode   = 2
)

// tables is a Config compiled for the packet path; immutable once built.
type tables struct {
	cfg     Config
	vtep    *overlay.VTEP
	in, out *nat.PrefixMap // in: dst From->To into the tunnel; out: src To->From out of it
	// own, ownBack: this site's networks as presented to the peer (LocalNAT), src From->To
	// into the tunnel and dst To->From out of it; nil without LocalNAT.
	own, ownBack *nat.PrefixMap
	routes       *route.Table
	nodes        []nodeHop
	relay        uint32 // the RelayNode's hop (hopNode + its index); 0: none
	tunnelMTU    int
	overlayMTU   int
	mss          uint16 // MSS that fits both MTUs
	mss6         uint16 // the same for IPv6
	overlayIP    [4]byte
	tunnelIP     [4]byte
	hasTunIP     bool
	// The same for IPv6 (has*: the address is set).
	overlayIP6, tunnelIP6       [16]byte
	hasOverlayIP6, hasTunnelIP6 bool
}

// withPathMTU returns t with its tunnel MTU limited to mtu (0: the configured one) and the
// MSS clamp to match; t itself if nothing changes. The tables are shared, not copied: they
// are immutable.
func (t *tables) withPathMTU(mtu int) *tables {
	eff := t.cfg.TunnelMTU
	if mtu > 0 && mtu < eff {
		eff = max(mtu, MinMTU)
	}
	if eff == t.tunnelMTU {
		return t
	}
	n := *t
	n.tunnelMTU = eff
	n.mss = uint16(min(eff, n.overlayMTU) - 40)
	n.mss6 = n.mss - 20
	return &n
}

type nodeHop struct {
	addr netip.AddrPort
	mac  packet.MAC
}

// compile checks cfg and builds its tables; with check, it only checks (every problem is found
// while routes are added, so the route table itself is not built).
func compile(cfg Config, check bool) (*tables, error) {
	c := cfg
	if c.TunnelMTU == 0 {
		c.TunnelMTU = DefaultTunnelMTU
	}
	if c.OverlayMTU == 0 {
		c.OverlayMTU = DefaultOverlayMTU
	}
	if c.ICMPRate == 0 {
		c.ICMPRate = DefaultICMPRate
	}
	if c.ICMPBurst == 0 {
		c.ICMPBurst = DefaultICMPBurst
	}
	if c.OverlayPort == 0 {
		c.OverlayPort = c.Overlay.Kind.DefaultPort()
	}
	var errs []error
	for _, m := range []struct {
		name string
		v    int
	}{{"tunnel MTU", c.TunnelMTU}, {"overlay MTU", c.OverlayMTU}} {
		if m.v < MinMTU || m.v > MaxMTU {
			errs = append(errs, fmt.Errorf("%s %d is outside %d-%d", m.name, m.v, MinMTU, MaxMTU))
		}
	}
	if c.ICMPBurst < 0 {
		errs = append(errs, fmt.Errorf("ICMP burst %d is negative", c.ICMPBurst))
	}

	t := &tables{cfg: c, tunnelMTU: c.TunnelMTU, overlayMTU: c.OverlayMTU}
	t.mss = uint16(min(c.TunnelMTU, c.OverlayMTU) - 40)
	t.mss6 = t.mss - 20 // the IPv6 header is 20 bytes longer

	ov := c.Overlay
	ov.Peers = append([]netip.Addr(nil), ov.Peers...)
	var b route.Builder
	for i, n := range c.Nodes {
		if !n.VTEP.IsValid() || n.VTEP.Is4In6() {
			errs = append(errs, fmt.Errorf("node %q: VTEP address %v must be an IPv4 or IPv6 address", n.Name, n.VTEP))
			continue
		}
		if n.MAC == (packet.MAC{}) || n.MAC[0]&1 != 0 {
			errs = append(errs, fmt.Errorf("node %q: overlay MAC %s must be a non-zero unicast address", n.Name, overlay.MACString(n.MAC)))
		}
		ov.Peers = append(ov.Peers, n.VTEP)
		t.nodes = append(t.nodes, nodeHop{addr: netip.AddrPortFrom(n.VTEP, c.OverlayPort), mac: n.MAC})
		if c.RelayNode != "" && n.Name == c.RelayNode {
			t.relay = uint32(hopNode + i)
		}
		hop := uint32(hopNode + i)
		for _, p := range n.PodCIDRs {
			if err := b.Add(p, hop); err != nil {
				errs = append(errs, fmt.Errorf("node %q pod CIDR: %w", n.Name, err))
			}
		}
		for _, a := range n.Pods {
			if err := b.Add(netip.PrefixFrom(a, a.BitLen()), hop); err != nil {
				errs = append(errs, fmt.Errorf("node %q pod %v: %w (is it on two nodes?)", n.Name, a, err))
			}
		}
	}
	vtep, err := overlay.New(ov)
	if err != nil {
		errs = append(errs, err)
	} else {
		t.vtep = vtep
		t.overlayIP = ov.IP.As4()
	}
	if c.TunnelIP.IsValid() {
		if !c.TunnelIP.Is4() {
			errs = append(errs, fmt.Errorf("tunnel IP %v must be IPv4", c.TunnelIP))
		} else {
			t.tunnelIP, t.hasTunIP = c.TunnelIP.As4(), true
		}
	}

	for _, a := range []struct {
		name string
		addr netip.Addr
		dst  *[16]byte
		has  *bool
	}{{"tunnel IPv6 address", c.TunnelIP6, &t.tunnelIP6, &t.hasTunnelIP6}, {"overlay IPv6 address", c.OverlayIP6, &t.overlayIP6, &t.hasOverlayIP6}} {
		switch {
		case !a.addr.IsValid():
		case !a.addr.Is6() || a.addr.Is4In6() || a.addr.IsLinkLocalUnicast() || a.addr.IsMulticast() || a.addr.IsUnspecified() || a.addr.IsLoopback():
			errs = append(errs, fmt.Errorf("%s %v must be a unicast IPv6 address of global or unique local scope", a.name, a.addr))
		default:
			*a.dst, *a.has = a.addr.As16(), true
		}
	}
	if hasIPv6(c) && min(c.TunnelMTU, c.OverlayMTU) < ipv6MinMTU {
		errs = append(errs, fmt.Errorf("IPv6 needs links of at least %d bytes: tunnel MTU %d, overlay MTU %d", ipv6MinMTU, c.TunnelMTU, c.OverlayMTU))
	}

	in, err := nat.NewPrefixMap(c.NAT...)
	if err != nil {
		errs = append(errs, err)
	} else {
		t.in, t.out = in, in.Inverse()
	}
	if len(c.LocalNAT) > 0 {
		own, err := nat.NewPrefixMap(c.LocalNAT...)
		if err != nil {
			errs = append(errs, fmt.Errorf("local NAT: %w", err))
		} else {
			t.own, t.ownBack = own, own.Inverse()
		}
	}
	for _, p := range c.NAT {
		if err := b.Add(p.From, hopTunnel); err != nil {
			errs = append(errs, fmt.Errorf("NAT prefix %s: %w", p.From, err))
		}
	}
	for _, p := range c.Remote {
		if err := b.Add(p, hopTunnel); err != nil {
			errs = append(errs, fmt.Errorf("remote prefix: %w", err))
		}
	}
	for _, a := range c.Local {
		if err := b.Add(netip.PrefixFrom(a, a.BitLen()), hopLocal); err != nil {
			errs = append(errs, fmt.Errorf("local address %v: %w", a, err))
		}
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("dataplane config: %w", errors.Join(errs...))
	}
	if !check {
		t.routes = b.Build()
	}
	return t, nil
}

// ipv6MinMTU is the least MTU of a link that carries IPv6 (RFC 8200 section 5).
const ipv6MinMTU = 1280

// hasIPv6 reports whether c routes any IPv6 prefix.
func hasIPv6(c Config) bool {
	for _, p := range c.Remote {
		if p.Addr().Is6() {
			return true
		}
	}
	for _, p := range c.NAT {
		if p.From.Addr().Is6() {
			return true
		}
	}
	for _, n := range c.Nodes {
		if n.HasIPv6() {
			return true
		}
	}
	return c.TunnelIP6.IsValid() || c.OverlayIP6.IsValid()
}

// Validate reports every problem of cfg as New and Reconfig would, without building anything.
func Validate(cfg Config) error {
	_, err := compile(cfg, true)
	return err
}
