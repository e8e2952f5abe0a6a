package gateway

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	netv1alpha1 "github.com/skein-net/skein/control/api/networking/v1alpha1"
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

// StockPeerScript is a shell script a Linux host with stock WireGuard (the kernel's, or
// wireguard-go, driven by wg from wireguard-tools) runs to be this gateway's peer: its
// interface, its end of the tunnel network, what it accepts from this gateway and routes to
// it. Placeholders (the constants above) stand for what only the peer knows. It refuses
// networks a stock peer cannot route to this gateway: one that is the peer's own (the sites
// overlap and local.remappedPodCIDR is not set), one that holds the peer's endpoint, a
// default route or a reserved range.
func (c *File) StockPeerScript(g *config.Gateway) (string, error) {
	presented := c.PresentedNetworks(g)
	var problems []string
	for _, p := range presented {
		switch {
		case !p.Addr().Is4():
			problems = append(problems, fmt.Sprintf("%v: a stock peer is given this site's IPv4 networks only", p))
		case p.Bits() < 8:
			problems = append(problems, fmt.Sprintf("%v is wider than a /8: routing it into the tunnel would take the peer's other traffic with it", p))
		case g.PeerEndpoint.IsValid() && p.Contains(g.PeerEndpoint.Addr()):
			problems = append(problems, fmt.Sprintf("%v holds the peer's own endpoint %v: the tunnel would route into itself", p, g.PeerEndpoint.Addr()))
		}
		if f, ok := netv1alpha1.ForbiddenRange(p); ok {
			problems = append(problems, fmt.Sprintf("%v overlaps %s (%s)", p, f.Prefix, f.Why))
		}
		for _, r := range g.AllowedIPs {
			if r.Overlaps(p) && r.Addr() != g.PeerTunnelIP {
				problems = append(problems, fmt.Sprintf("this site's pods, %v to the peer, overlap the peer's own network %v: a stock peer, which does no NAT, cannot route to them; set local.podCIDR and local.remappedPodCIDR to a prefix free on both sides (docs/standalone.md, example 2)", p, r))
			}
		}
	}
	if len(problems) > 0 {
		return "", fmt.Errorf("no stock peer can be set up for this gateway:\n  %s", strings.Join(problems, "\n  "))
	}

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
	fmt.Fprintf(&b, "#!/bin/sh\n")
	fmt.Fprintf(&b, "# A Linux host with stock WireGuard runs this (as root, sh -eu FILE) to be the peer of the\n")
	fmt.Fprintf(&b, "# skein gateway %s (%s).\n", g.PrivateKey.Public(), c.Role)
	fmt.Fprintf(&b, "# Replace %s with the file holding the peer's private key (wg genkey), whose\n", PeerKeyPlaceholder)
	fmt.Fprintf(&b, "# public key must be the gateway's peerPublicKey (%s).\n", g.PeerPublicKey)
	if c.Role == "server" {
		fmt.Fprintf(&b, "# Replace %s with the address the peer reaches the gateway at.\n", GatewayAddressPlaceholder)
	}
	fmt.Fprintf(&b, "# The peer sees the gateway's site as %s. Another interface name than %s is fine.\n", joinPrefixes(presented), wg)
	fmt.Fprintf(&b, "set -eu\n")
	fmt.Fprintf(&b, "if ip link show %s >/dev/null 2>&1; then echo \"%s exists: pick another name\" >&2; exit 1; fi\n", wg, wg)
	fmt.Fprintf(&b, "ip link add %s type wireguard || wireguard-go %s\n", wg, wg)
	fmt.Fprintf(&b, "wg set %s private-key %s", wg, PeerKeyPlaceholder)
	if c.Role == "client" {
		// The gateway dials the peer: the peer listens on the port of the gateway's endpoint.
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
	fmt.Fprintf(&b, "# When hosts behind the peer reach the gateway's site through it, the peer forwards:\n")
	fmt.Fprintf(&b, "# sysctl -w net.ipv4.ip_forward=1\n")
	return b.String(), nil
}

func joinPrefixes(ps []netip.Prefix) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return strings.Join(s, ", ")
}
