package config

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	netv1alpha1 "github.com/skein-net/skein/control/api/networking/v1alpha1"
	"github.com/skein-net/skein/dataplane"
	"github.com/skein-net/skein/dataplane/nat"
	"github.com/skein-net/skein/dataplane/overlay"
	"github.com/skein-net/skein/dataplane/packet"
)

// The gateway's own defaults (the spec's, such as the MTU, the port and the VNI, are in the API
// package). Build is the only place that applies them; flags may show them as their defaults.
const (
	// DefaultTunnelCIDR is the /30 inside the tunnel: the server takes its first host, the
	// client the second, and each probes the other there.
	DefaultTunnelCIDR = "169.254.100.0/30"
	// DefaultKeepalive is a client's WireGuard persistent keepalive in seconds, so that NATs
	// between the gateways keep the path open. A server sends none by default.
	DefaultKeepalive = 25
	// DefaultProbeInterval and DefaultProbeFail: a probe through the tunnel every 2 s, and the
	// Connection is Error after 5 lost in a row.
	DefaultProbeInterval = 2 * time.Second
	DefaultProbeFail     = 5
	// MinProbeInterval bounds how often the gateway probes its peer.
	MinProbeInterval = 100 * time.Millisecond
	// DefaultHTTPListen is where /healthz, /readyz and /metrics are served.
	DefaultHTTPListen = "127.0.0.1:9471"
	// Defaults of the gateway's Go runtime: a soft heap limit and a GOGC. Under 32 TCP streams
	// on 2 cores they keep the peak RSS below 150 MiB; a tighter limit makes the collector run
	// often enough to cost throughput (wireguard-go keeps 64 KiB buffers in flight).
	DefaultMemoryLimitMiB = 140
	DefaultGCPercent      = 400
	// MaxWindow bounds the window setting: 16384 packets hold 1 GiB of wireguard-go's buffers.
	MaxWindow = 16384
)

// Spec is a gateway's configuration as a front-end (the YAML file, the API objects and flags)
// reads it, typed but not defaulted: a zero value (or a nil pointer) asks for the default.
// Build turns it into a Gateway.
type Spec struct {
	// Server listens; a client dials PeerEndpoint.
	Server bool

	PrivateKey    Key
	PeerPublicKey Key
	// ListenPort is the WireGuard UDP port: required for a server, 0 (any) for a client.
	ListenPort uint16
	// PeerEndpoint is the server's address:port; required for a client, not allowed on a
	// server (it learns the peer's from the handshake).
	PeerEndpoint netip.AddrPort
	// Keepalive is WireGuard's persistent keepalive in seconds (nil: DefaultKeepalive on a
	// client, 0, off, on a server).
	Keepalive *int

	// TunnelMTU is the largest inner packet in the tunnel (0: the spec's DefaultMTU).
	TunnelMTU int
	// TunnelCIDR is the tunnel's /30 or wider IPv4 network (zero: DefaultTunnelCIDR). A
	// gateway that carries IPv6 also has each end's address inside netv1alpha1.Internal6Prefix
	// (netv1alpha1.Internal6), in the tunnel as on the overlay.
	TunnelCIDR netip.Prefix

	// Remote are the peer cluster's networks.
	Remote []Remote
	// Local are this site's own networks, and how the peer sees them when they are presented
	// under another prefix (standalone: local.podCIDR and local.remappedPodCIDR). Empty: the
	// peer sees local addresses as they are and nothing checks the nodes' pod CIDRs.
	Local []Local
	// Overlay is the gateway's side of the node overlay.
	Overlay Overlay
	// Nodes are this cluster's node VTEPs and what they host.
	Nodes []dataplane.Node
	// RequireNodes refuses a Spec without nodes (a standalone gateway has no one to tell it
	// later). An in-cluster gateway starts without them and learns them live.
	RequireNodes bool

	// ProbeInterval (0: DefaultProbeInterval, at least MinProbeInterval) and ProbeFail (0:
	// DefaultProbeFail) tune the prober.
	ProbeInterval time.Duration
	ProbeFail     int

	// HTTPListen is where /healthz, /readyz and /metrics are served ("": DefaultHTTPListen,
	// "off": nowhere); Pprof adds Go's profiler there.
	HTTPListen string
	Pprof      bool
	// MemoryLimitMiB is the soft heap limit (0: DefaultMemoryLimitMiB, -1: none); GCPercent
	// is GOGC (0: DefaultGCPercent, -1: off).
	MemoryLimitMiB int
	GCPercent      int
	// Window is the most packets wireguard-go may hold per direction (0: the dataplane's
	// default, at most MaxWindow).
	Window int
}

// Remote is one network of the peer cluster: Real as the peer numbers it, Seen as this
// cluster sees it (zero or equal to Real: not remapped, NAT-less).
type Remote struct {
	// Field names the input in errors (such as "remote.remappedPodCIDR").
	Field      string
	Real, Seen netip.Prefix
}

// Local is one of this site's networks: Real as its nodes number it, Presented as the peer
// sees it (zero or equal to Real: as it is). Every node's pod CIDRs must lie in a Local's Real
// when any Local is given.
type Local struct {
	// Field and PresentedField name the inputs in errors (such as "local.podCIDR").
	Field, PresentedField string
	Real, Presented       netip.Prefix
}

// Overlay is the gateway's VTEP.
type Overlay struct {
	// Kind is the encapsulation (0: VXLAN); Port its UDP port, the gateway's and the nodes'
	// (0: the kind's IANA port); VNI nil means the spec's DefaultVNI.
	Kind overlay.Kind
	Port uint16
	VNI  *uint32
	// Listen is the gateway's underlay address, where nodes send overlay frames: IPv4, or IPv6
	// in an IPv6-only cluster (the nodes' VTEPs are then IPv6 too).
	Listen netip.Addr
	// IP is the gateway's IPv4 overlay address; MAC its overlay MAC (zero: derived from IP,
	// overlay.GatewayMAC). A gateway that carries IPv6 is also netv1alpha1.Internal6(IP).
	IP  netip.Addr
	MAC packet.MAC
	// MTU of the nodes' overlay devices (0: the dataplane's default for an IPv4 underlay,
	// 1500 less overlay.Overhead6 for an IPv6 one).
	MTU int
	// CompleteChecksums recomputes the inner checksums of what nodes send (nil: true).
	CompleteChecksums *bool
}

// Build fills every default of s, validates it (naming every bad field at once) and returns
// the gateway's configuration. It is the only function that applies defaults; the front-ends
// only map their input.
func Build(s Spec) (*Gateway, error) {
	b := &builder{s: s, g: &Gateway{PrivateKey: s.PrivateKey, PeerPublicKey: s.PeerPublicKey, Pprof: s.Pprof}, v6: carriesIPv6(s)}
	b.runtime()
	b.wireGuard()
	b.tunnel()
	b.remote()
	b.overlay()
	b.local()
	b.crossCheck()
	b.prober()
	if len(b.errs) == 0 {
		if err := dataplane.Validate(b.dp); err != nil {
			b.errs = append(b.errs, err.Error())
		}
	}
	if len(b.errs) > 0 {
		return nil, &Error{Problems: b.errs}
	}
	b.g.Dataplane = b.dp
	return b.g, nil
}

// builder carries one Build: its input, what it has built so far, and the problems found.
type builder struct {
	s    Spec
	g    *Gateway
	dp   dataplane.Config
	errs []string
	// v6: the gateway carries IPv6 (a network of either side, or a node's pods, is IPv6), so
	// it has IPv6 addresses of its own.
	v6 bool
}

// carriesIPv6 reports whether any network s routes is IPv6.
func carriesIPv6(s Spec) bool {
	for _, r := range s.Remote {
		if r.Real.Addr().Is6() || r.Seen.Addr().Is6() {
			return true
		}
	}
	for _, l := range s.Local {
		if l.Real.Addr().Is6() || l.Presented.Addr().Is6() {
			return true
		}
	}
	for _, n := range s.Nodes {
		if n.HasIPv6() {
			return true
		}
	}
	return false
}

// internal6 is netv1alpha1.Internal6Prefix.
var internal6 = netip.MustParsePrefix(netv1alpha1.Internal6Prefix)

func (b *builder) bad(field, format string, a ...any) {
	b.errs = append(b.errs, field+": "+fmt.Sprintf(format, a...))
}

// runtime: HTTP endpoints, the Go runtime's memory limit and GOGC, the window.
func (b *builder) runtime() {
	s, g := &b.s, b.g
	g.HTTPListen = s.HTTPListen
	if g.HTTPListen == "" {
		g.HTTPListen = DefaultHTTPListen
	}
	switch {
	case s.MemoryLimitMiB == 0:
		g.MemoryLimit = DefaultMemoryLimitMiB << 20
	case s.MemoryLimitMiB > 1<<30:
		b.bad("memoryLimitMiB", "%d MiB is more than a PiB: want the gateway's heap limit in MiB (default %d)", s.MemoryLimitMiB, DefaultMemoryLimitMiB)
	case s.MemoryLimitMiB > 0:
		g.MemoryLimit = int64(s.MemoryLimitMiB) << 20
	case s.MemoryLimitMiB < -1:
		b.bad("memoryLimitMiB", "%d: want a number of MiB, or -1 for no limit", s.MemoryLimitMiB)
	}
	g.GCPercent = s.GCPercent
	if g.GCPercent == 0 {
		g.GCPercent = DefaultGCPercent
	}
	if g.GCPercent < -1 {
		b.bad("gcPercent", "%d: want a percentage, or -1 to leave collection to the memory limit", s.GCPercent)
	}
	g.Window = s.Window
	if s.Window < 0 || s.Window > MaxWindow {
		b.bad("window", "%d: want 1-%d packets (0: the default %d)", s.Window, MaxWindow, dataplane.DefaultWindow)
	}
}

// wireGuard: the role's port or endpoint, the keys, the keepalive.
func (b *builder) wireGuard() {
	s, g := &b.s, b.g
	if s.Server {
		g.ListenPort = s.ListenPort
		if s.ListenPort == 0 {
			b.bad("listenPort", "a server needs a port (the spec's default is %d)", netv1alpha1.DefaultPort)
		}
		if s.PeerEndpoint.IsValid() {
			b.bad("endpoint", "a server does not dial; remove it or use role: client")
		}
	} else {
		g.ListenPort, g.PeerEndpoint = s.ListenPort, s.PeerEndpoint
		if !s.PeerEndpoint.IsValid() {
			b.bad("endpoint", "a client needs the server's address:port")
		}
	}
	if s.PeerPublicKey == (Key{}) {
		b.bad("peerPublicKey", "required: the peer gateway's public key")
	}
	if s.PrivateKey == (Key{}) {
		b.bad("privateKey", "required: this gateway's private key")
	} else if s.PeerPublicKey == s.PrivateKey.Public() {
		b.bad("peerPublicKey", "is this gateway's own public key: want the peer gateway's")
	}
	if !s.Server && s.PeerEndpoint.IsValid() && (s.PeerEndpoint.Port() == 0 || s.PeerEndpoint.Addr().IsUnspecified()) {
		b.bad("endpoint", "%v: want the server's address and a port other than 0", s.PeerEndpoint)
	}
	keepalive := 0
	if !s.Server {
		keepalive = DefaultKeepalive
	}
	if s.Keepalive != nil {
		keepalive = *s.Keepalive
	}
	if keepalive < 0 || keepalive > 65535 {
		b.bad("keepaliveSeconds", "%d is outside 0-65535", keepalive)
	} else {
		g.Keepalive = keepalive
	}
}

// tunnel: the two ends of the tunnel's /30 (the server takes the first host) and the MTU.
func (b *builder) tunnel() {
	s, g := &b.s, b.g
	tp := s.TunnelCIDR
	if !tp.IsValid() {
		tp = netip.MustParsePrefix(DefaultTunnelCIDR)
	}
	if !tp.Addr().Is4() || tp.Bits() > 30 || tp.Masked() != tp {
		b.bad("tunnelCIDR", "%s: want an IPv4 network of at least 4 addresses, such as %s", tp, DefaultTunnelCIDR)
	} else {
		first := tp.Addr().Next()
		g.TunnelIP, g.PeerTunnelIP = first, first.Next()
		if !s.Server {
			g.TunnelIP, g.PeerTunnelIP = g.PeerTunnelIP, g.TunnelIP
		}
	}
	b.dp.TunnelIP, b.dp.TunnelMTU = g.TunnelIP, s.TunnelMTU
	if b.dp.TunnelMTU == 0 {
		b.dp.TunnelMTU = netv1alpha1.DefaultMTU
	}
	if g.PeerTunnelIP.IsValid() {
		b.dp.Remote = append(b.dp.Remote, netip.PrefixFrom(g.PeerTunnelIP, 32))
		g.AllowedIPs = append(g.AllowedIPs, netip.PrefixFrom(g.PeerTunnelIP, 32))
		if b.v6 {
			g.TunnelIP6, g.PeerTunnelIP6 = netv1alpha1.Internal6(g.TunnelIP), netv1alpha1.Internal6(g.PeerTunnelIP)
			b.dp.TunnelIP6 = g.TunnelIP6
			b.dp.Remote = append(b.dp.Remote, netip.PrefixFrom(g.PeerTunnelIP6, 128))
			g.AllowedIPs = append(g.AllowedIPs, netip.PrefixFrom(g.PeerTunnelIP6, 128))
		}
	}
}

// isCIDR reports whether p is an IPv4 or IPv6 network without host bits (an IPv4-mapped
// IPv6 prefix is neither).
func isCIDR(p netip.Prefix) bool {
	return p.IsValid() && p.Masked() == p && !p.Addr().Is4In6()
}

// family names p's address family.
func family(p netip.Prefix) string {
	if p.Addr().Is4() {
		return "IPv4"
	}
	return "IPv6"
}

// mapping checks a network and the prefix it is mapped onto (zero: itself): IPv4 or IPv6
// networks without host bits, of one family and length, so that each address moves one for
// one. It names a problem by field (the network) or mappedField, and returns the prefix
// mapped onto.
func (b *builder) mapping(field, mappedField string, real, mapped netip.Prefix) (netip.Prefix, bool) {
	if !isCIDR(real) {
		b.bad(field, "%s is not an IPv4 or IPv6 CIDR without host bits", real)
		return mapped, false
	}
	if !mapped.IsValid() {
		return real, true
	}
	if !isCIDR(mapped) {
		b.bad(mappedField, "%s is not an IPv4 or IPv6 CIDR without host bits", mapped)
		return mapped, false
	}
	if mapped.Addr().Is4() != real.Addr().Is4() {
		b.bad(mappedField, "%s is %s and %s %s: want two CIDRs of one family", mapped, family(mapped), real, family(real))
		return mapped, false
	}
	if mapped.Bits() != real.Bits() {
		b.bad(mappedField, "%s must have the length of %s (/%d): want two CIDRs of the same length, each address moved one for one", mapped, real, real.Bits())
		return mapped, false
	}
	return mapped, true
}

// remote: the peer's networks, routed into the tunnel as this cluster sees them, translated
// when remapped, and accepted from the peer under their real addresses.
func (b *builder) remote() {
	for _, r := range b.s.Remote {
		seen, ok := b.mapping(r.Field, r.Field, r.Real, r.Seen)
		if !ok {
			continue
		}
		if why := forbidden(r.Real, seen); why != "" {
			b.bad(r.Field, "%s", why)
			continue
		}
		b.g.AllowedIPs = append(b.g.AllowedIPs, r.Real)
		if seen == r.Real {
			b.dp.Remote = append(b.dp.Remote, r.Real)
		} else {
			b.dp.NAT = append(b.dp.NAT, nat.Pair{From: seen, To: r.Real})
		}
	}
}

// overlay: the gateway's VTEP (kind, port, VNI, addresses, MAC) and the nodes.
func (b *builder) overlay() {
	o, g := b.s.Overlay, b.g
	if o.Kind == 0 {
		o.Kind = overlay.VXLAN
	}
	vni := uint32(netv1alpha1.DefaultVNI)
	if o.VNI != nil {
		vni = *o.VNI
	}
	if vni > 1<<24-1 {
		b.bad("overlay.vni", "%d: want a VNI below 2^24", vni)
	}
	port := o.Port
	if port == 0 {
		port = o.Kind.DefaultPort()
	}
	b.dp.Overlay = overlay.Config{Kind: o.Kind, VNI: vni, IP: o.IP, MAC: o.MAC}
	b.dp.OverlayPort, b.dp.OverlayMTU = port, o.MTU
	if o.MTU == 0 && o.Listen.Is6() {
		b.dp.OverlayMTU = 1500 - overlay.Overhead6
	}
	b.dp.CompleteChecksums = o.CompleteChecksums == nil || *o.CompleteChecksums
	if !o.Listen.IsValid() || o.Listen.Is4In6() || o.Listen.Zone() != "" {
		b.bad("overlay.listen", "%v: want the gateway's IPv4 or IPv6 underlay address", o.Listen)
	} else {
		g.OverlayListen = netip.AddrPortFrom(o.Listen, port)
	}
	if !o.IP.Is4() {
		b.bad("overlay.ip", "%v: want the gateway's IPv4 overlay address", o.IP)
	} else if o.MAC == (packet.MAC{}) {
		b.dp.Overlay.MAC = overlay.GatewayMAC(o.IP)
	}
	if o.IP.IsValid() && g.TunnelIP.IsValid() {
		b.dp.Local = []netip.Addr{o.IP, g.TunnelIP}
		if b.v6 && o.IP.Is4() {
			b.dp.OverlayIP6 = netv1alpha1.Internal6(o.IP)
			b.dp.Local = append(b.dp.Local, b.dp.OverlayIP6, g.TunnelIP6)
		}
	}
	if b.s.RequireNodes && len(b.s.Nodes) == 0 {
		b.bad("nodes", "at least one node VTEP is needed to deliver traffic from the tunnel")
	}
	if o.Listen.IsUnspecified() {
		b.bad("overlay.listen", "%v: want the gateway's own underlay address (the nodes send to it, and it checks their packets come from their VTEPs)", o.Listen)
	}
	vteps := map[netip.Addr]int{}
	for i, n := range b.s.Nodes {
		switch v := n.VTEP; {
		case v.IsUnspecified():
			b.bad(fmt.Sprintf("nodes[%d].vtep", i), "%v: want the node's underlay address", n.VTEP)
		case !v.IsValid() || v.Is4In6() || v.Zone() != "" || v.IsMulticast() || v == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
			// (Loopback stays allowed: a gateway and its nodes on one host, as in tests.)
			b.bad(fmt.Sprintf("nodes[%d].vtep", i), "%v is not a node's unicast underlay address", n.VTEP)
		case o.Listen.IsValid() && v.Is4() != o.Listen.Is4():
			b.bad(fmt.Sprintf("nodes[%d].vtep", i), "%v is not of the family of the gateway's underlay address %v: the overlay socket speaks one", n.VTEP, o.Listen)
		case v == o.Listen || v == o.IP:
			b.bad(fmt.Sprintf("nodes[%d].vtep", i), "%v is the gateway's own address, not a node's", n.VTEP)
		}
		if j, dup := vteps[n.VTEP]; dup {
			b.bad(fmt.Sprintf("nodes[%d].vtep", i), "%v is also nodes[%d]'s: each node has its own VTEP", n.VTEP, j)
		}
		vteps[n.VTEP] = i
	}
	// The peer's networks, as routed here (their real addresses are the peer's and may well
	// overlap this cluster's: that is what the NAT is for), must not take the overlay's own
	// addresses with them.
	for _, r := range b.s.Remote {
		p := r.Seen
		if !p.IsValid() {
			p = r.Real
		}
		if p.IsValid() {
			if o.Listen.IsValid() && p.Contains(o.Listen) {
				b.bad(r.Field, "%v holds the gateway's underlay address %v: the overlay would route into the tunnel", p, o.Listen)
			}
			for i, n := range b.s.Nodes {
				if p.Contains(n.VTEP) {
					b.bad(r.Field, "%v holds nodes[%d]'s VTEP %v: the overlay would route into the tunnel", p, i, n.VTEP)
				}
			}
		}
	}
	b.dp.Nodes = b.s.Nodes
	b.dp.RelayNode = hostOf(b.s.Nodes, o.Listen)
}

// hostOf is the node that hosts address a (a pod /32 of a node wins over a node's pod CIDR),
// "" when none does: the node the gateway runs on, which relays the other nodes' frames to
// it (dataplane.Config.RelayNode).
func hostOf(nodes []dataplane.Node, a netip.Addr) string {
	if !a.IsValid() {
		return ""
	}
	for _, n := range nodes {
		if slices.Contains(n.Pods, a) {
			return n.Name
		}
	}
	for _, n := range nodes {
		if slices.ContainsFunc(n.PodCIDRs, func(p netip.Prefix) bool { return p.Contains(a) }) {
			return n.Name
		}
	}
	return ""
}

// local: this site's networks, and the prefixes they are presented under to the peer
// (translated by the dataplane: sources into the tunnel, destinations out of it).
func (b *builder) local() {
	if len(b.s.Local) == 0 {
		return
	}
	tp := b.s.TunnelCIDR
	if !tp.IsValid() {
		tp = netip.MustParsePrefix(DefaultTunnelCIDR)
	}
	var reals []netip.Prefix
	for _, l := range b.s.Local {
		if !isCIDR(l.Real) {
			b.bad(l.Field, "%s is not an IPv4 or IPv6 CIDR without host bits", l.Real)
			continue
		}
		if why := forbidden(l.Real); why != "" {
			b.bad(l.Field, "%s", why)
			continue
		}
		reals = append(reals, l.Real)
		p, ok := b.mapping(l.Field, l.PresentedField, l.Real, l.Presented)
		if !ok || p == l.Real {
			continue
		}
		if why := forbidden(p); why != "" {
			b.bad(l.PresentedField, "%s", why)
			continue
		}
		if p.Overlaps(tp) {
			b.bad(l.PresentedField, "%v overlaps tunnelCIDR %v", p, tp)
			continue
		}
		clash := false
		for _, r := range b.s.Remote {
			for _, q := range []netip.Prefix{r.Real, r.Seen} {
				if q.IsValid() && q.Overlaps(p) && !clash {
					clash = true
					b.bad(l.PresentedField, "%v overlaps %s %v: the peer could not tell its own addresses from this site's; pick a prefix free on both sides", p, r.Field, q)
				}
			}
		}
		if o := b.s.Overlay; !clash && (p.Contains(o.IP) || p.Contains(o.Listen)) {
			b.bad(l.PresentedField, "%v holds the gateway's overlay or underlay address", p)
			continue
		}
		if !clash {
			b.dp.LocalNAT = append(b.dp.LocalNAT, nat.Pair{From: l.Real, To: p})
		}
	}
	for i := range reals {
		for j := range i {
			if reals[i].Overlaps(reals[j]) {
				b.bad(b.s.Local[i].Field, "%v overlaps %v", reals[i], reals[j])
			}
		}
	}
	if len(reals) == 0 {
		return
	}
	// With the local networks named, every node's pods must be in one: with a remap, pods
	// outside would never reach the peer (the dataplane lets no untranslated local address
	// cross), and without one the peer would not route to them.
	for i, n := range b.s.Nodes {
	cidrs:
		for j, pc := range n.PodCIDRs {
			for _, r := range reals {
				if r.Contains(pc.Addr()) && r.Bits() <= pc.Bits() {
					continue cidrs
				}
			}
			b.bad(fmt.Sprintf("nodes[%d].podCIDRs[%d]", i, j), "%v is outside %s %v: list every local pod network there (its pods would not reach the peer)", pc, b.s.Local[0].Field, reals[0])
		}
	}
}

// crossCheck: the tunnel's network, the peer's networks as routed here, the overlay's
// addresses and the local pods' networks must not overlap one another: an address in two of
// them is routed one way or the other by accident.
func (b *builder) crossCheck() {
	tp := b.s.TunnelCIDR
	if !tp.IsValid() {
		tp = netip.MustParsePrefix(DefaultTunnelCIDR)
	}
	o := b.s.Overlay
	holds := func(what string, a netip.Addr) {
		if a.IsValid() && tp.Contains(a) {
			b.bad("tunnelCIDR", "%v holds %s %v", tp, what, a)
		}
	}
	holds("the gateway's overlay address overlay.ip", o.IP)
	holds("the gateway's underlay address overlay.listen", o.Listen)
	for i, n := range b.s.Nodes {
		holds(fmt.Sprintf("nodes[%d]'s VTEP", i), n.VTEP)
		for j, pc := range n.PodCIDRs {
			if pc.Overlaps(internal6) {
				b.bad(fmt.Sprintf("nodes[%d].podCIDRs[%d]", i, j), "%v overlaps %v, which holds the gateways' own IPv6 addresses", pc, internal6)
			}
		}
	}
	for _, r := range b.s.Remote {
		for _, p := range []netip.Prefix{r.Real, r.Seen} {
			if p.IsValid() && p.Overlaps(tp) {
				b.bad("tunnelCIDR", "%v overlaps %s %v: the tunnel's own addresses must be apart from the peer's networks", tp, r.Field, p)
			}
		}
		seen := r.Seen
		if !seen.IsValid() {
			seen = r.Real
		}
		if !seen.IsValid() {
			continue
		}
		if o.IP.IsValid() && seen.Contains(o.IP) {
			b.bad(r.Field, "%v holds the gateway's overlay address %v", seen, o.IP)
		}
		for i, n := range b.s.Nodes {
			for _, pc := range n.PodCIDRs {
				if seen.Overlaps(pc) {
					b.bad(r.Field, "%v overlaps nodes[%d]'s pod CIDR %v: remap the peer's network (in a file: remote.remappedPodCIDR or remote.remappedExternalCIDR) so that local pods keep their addresses", seen, i, pc)
				}
			}
		}
	}
}

// forbidden says why a peer's network (as it is, and as seen here) can never be routed into
// the tunnel: a default route or a range that is never a peer's ("" when it may).
func forbidden(ps ...netip.Prefix) string {
	for _, p := range ps {
		if p.Bits() == 0 {
			return fmt.Sprintf("%v is a default route: it would send all traffic into the tunnel", p)
		}
		if f, ok := netv1alpha1.ForbiddenRange(p); ok {
			return fmt.Sprintf("%v overlaps %s (%s)", p, f.Prefix, f.Why)
		}
	}
	return ""
}

// prober: how often the peer is probed and after how many losses the connection is Error.
func (b *builder) prober() {
	s, g := &b.s, b.g
	g.ProbeInterval = s.ProbeInterval
	if g.ProbeInterval == 0 {
		g.ProbeInterval = DefaultProbeInterval
	}
	if g.ProbeInterval < MinProbeInterval {
		b.bad("probe.interval", "%v: want a duration of at least %v, such as %v", s.ProbeInterval, MinProbeInterval, DefaultProbeInterval)
	}
	g.ProbeFail = s.ProbeFail
	if g.ProbeFail < 0 {
		b.bad("probe.failAfter", "%d is negative", s.ProbeFail)
	}
	if g.ProbeFail == 0 {
		g.ProbeFail = DefaultProbeFail
	}
}

// Error lists everything wrong with a Spec, one problem a line, each led by the field it
// concerns.
type Error struct {
	Problems []string
}

func (e *Error) Error() string {
	return "invalid gateway config:\n  " + strings.Join(e.Problems, "\n  ")
}

// Join adds the problems a front-end found before Build (input that did not parse, each led by
// its field) to Build's own, leaving out Build's about a field the front-end already named (or
// one it named more precisely: privateKeyFile for privateKey): a key that did not parse is not
// also "required".
func Join(front []string, err error) error {
	if err == nil && len(front) == 0 {
		return nil
	}
	problems := append([]string{}, front...)
	var e *Error
	switch {
	case err == nil:
	case errors.As(err, &e):
		named := map[string]bool{}
		for _, p := range front {
			field, _, _ := strings.Cut(p, ": ")
			named[field] = true
		}
	next:
		for _, p := range e.Problems {
			field, _, _ := strings.Cut(p, ": ")
			for f := range named {
				if strings.HasPrefix(f, field) {
					continue next
				}
			}
			problems = append(problems, p)
		}
	default:
		problems = append(problems, err.Error())
	}
	return &Error{Problems: problems}
}
