package gateway

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/skein-net/skein/control/gateway/config"
)

// Placeholders in StockPeerScript's output: what this gateway's configuration cannot know.
const (
	// PeerKeyPlaceholder stands for the file holding the stock peer's private key.
	PeerKeyPlaceholder = "PEER_PRIVATE_KEY_FILE"
	// PeerInterfacePlaceholder is the name the script gives the peer's WireGuard interface.
	PeerInterfacePlaceholder = "wg0"
	// GatewayAddressPlaceholder stands for the address the peer reaches this gateway at (the
	// configuration has only its port).
	GatewayAddressPlaceholder = "GATEWAY_ADDRESS"
)

// PresentedNetworks are the networks of this site as the peer sees them: the remapped local
// pod network, or the local pod network, or else every node's pod CIDRs.
func (c *File) PresentedNetworks(g *config.Gateway) []netip.Prefix {
	if len(g.Dataplane.LocalNAT) > 0 {
		var out []netip.Prefix
		for _, p := range g.Dataplane.LocalNAT {
			out = append(out, p.To)
		}
		return out
	}
	if p, err := netip.ParsePrefix(c.Local.PodCIDR); err == nil {
		return []netip.Prefix{p}
	}
	var out []netip.Prefix
	for _, n := range g.Dataplane.Nodes {
		out = append(out, n.PodCIDRs...)
	}
	slices.SortFunc(out, func(a, b netip.Prefix) int { return a.Addr().Compare(b.Addr()) })
	return slices.Compact(out)
}

// StockPeerScript is the shell commands a Linux host with stock WireGuard (the kernel's, or
// wireguard-go, driven by wg from wireguard-tools) runs to be this gateway's peer: its
// interface, its end of the tunnel network, what it accepts from this gateway and routes to
// it. Placeholders (the constants above) stand for what only the peer knows.
func (c *File) StockPeerScript(g *config.Gateway) string {
	presented := c.PresentedNetworks(g)
	allowed := []string{netip.PrefixFrom(g.TunnelIP, 32).String()}
	for _, p := range presented {
		allowed = append(allowed, p.String())
	}
	tunnelBits := 30
	if c.TunnelCIDR != "" {
		if p, err := netip.ParsePrefix(c.TunnelCIDR); err == nil {
			tunnelBits = p.Bits()
		}
	}
	wg := PeerInterfacePlaceholder
	var b strings.Builder
	fmt.Fprintf(&b, "# Commands for a Linux host with stock WireGuard to be the peer of this skein gateway\n")
	fmt.Fprintf(&b, "# (%s, public key %s).\n", c.Role, g.PrivateKey.Public())
	fmt.Fprintf(&b, "# Replace %s with the file holding the peer's private key (wg genkey), whose\n", PeerKeyPlaceholder)
	fmt.Fprintf(&b, "# public key must be this gateway's peerPublicKey (%s).\n", g.PeerPublicKey)
	if c.Role == "server" {
		fmt.Fprintf(&b, "# Replace %s with the address the peer reaches this gateway at.\n", GatewayAddressPlaceholder)
	}
	fmt.Fprintf(&b, "# The peer sees this site's pods as %s.\n", joinPrefixes(presented))
	fmt.Fprintf(&b, "ip link add %s type wireguard || wireguard-go %s\n", wg, wg)
	fmt.Fprintf(&b, "wg set %s private-key %s", wg, PeerKeyPlaceholder)
	if c.Role == "client" {
		// This gateway dials the peer: the peer listens on the port of the gateway's endpoint.
		fmt.Fprintf(&b, " listen-port %d", g.PeerEndpoint.Port())
	}
	fmt.Fprintf(&b, " \\\n    peer %s", g.PrivateKey.Public())
	if c.Role == "server" {
		fmt.Fprintf(&b, " endpoint %s:%d persistent-keepalive %d", GatewayAddressPlaceholder, g.ListenPort, config.DefaultKeepalive)
	}
	fmt.Fprintf(&b, " \\\n    allowed-ips %s\n", strings.Join(allowed, ","))
	fmt.Fprintf(&b, "ip addr add %s/%d dev %s\n", g.PeerTunnelIP, tunnelBits, wg)
	fmt.Fprintf(&b, "ip link set %s mtu %d up\n", wg, g.Dataplane.TunnelMTU)
	for _, p := range presented {
		fmt.Fprintf(&b, "ip route add %s dev %s\n", p, wg)
	}
	fmt.Fprintf(&b, "# Where hosts behind the peer use it as their router towards these networks:\n")
	fmt.Fprintf(&b, "sysctl -w net.ipv4.ip_forward=1\n")
	return b.String()
}

func joinPrefixes(ps []netip.Prefix) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return strings.Join(s, ", ")
}
